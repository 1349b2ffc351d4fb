# `cmake --install <build> --prefix P` (docs/install.md):
#   P/lib/libsinkgraph.so.X.Y.Z (SONAME libsinkgraph.so.X.Y), P/lib/libsinkgraph_dist.so.X.Y.Z
#   (over MPI when built with SINKGRAPH_MPI, else refusing it), P/include/sinkgraph/,
#   P/bin/sinkgraph (RUNPATH $ORIGIN/../lib), P/share/sinkgraph/stories260K/,
#   P/lib/cmake/sinkgraph/ (find_package(sinkgraph CONFIG), target sinkgraph::sinkgraph),
#   P/lib/pkgconfig/sinkgraph.pc, and, when the Python package is built,
#   P/<SINKGRAPH_PYTHON_INSTALL_DIR>/sinkgraph/.
include(CMakePackageConfigHelpers)

set(SG_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sinkgraph)

install(TARGETS sinkgraph EXPORT sinkgraphTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The distributed layer (sinkgraph::sinkgraph_dist; the CLI links it): with
# SINKGRAPH_MPI it links Debian's Open MPI from the system library folder.
install(TARGETS sinkgraph_dist EXPORT sinkgraphTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sinkgraph
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# The CLI finds the library beside it, wherever the prefix is moved.
file(RELATIVE_PATH SG_BIN_TO_LIB ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set_target_properties(sinkgraph_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${SG_BIN_TO_LIB}")
install(TARGETS sinkgraph_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Its default model: <bin>/../share/sinkgraph/stories260K (tools/default_model.cpp).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/stories260K
        DESTINATION ${CMAKE_INSTALL_DATADIR}/sinkgraph)

install(EXPORT sinkgraphTargets NAMESPACE sinkgraph:: DESTINATION ${SG_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sinkgraphConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/sinkgraphConfig.cmake
                              INSTALL_DESTINATION ${SG_CMAKE_INSTALL_DIR})
# Before 1.0 only the same minor version promises compatibility.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sinkgraphConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sinkgraphConfig.cmake
              ${PROJECT_BINARY_DIR}/sinkgraphConfigVersion.cmake
        DESTINATION ${SG_CMAKE_INSTALL_DIR})

# pkg-config: paths relative to ${prefix}, so the file stays right if the
# prefix is moved (and with --prefix given only at install time).
file(RELATIVE_PATH SG_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SG_PC_TO_PREFIX "${SG_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/sinkgraph.pc.in ${PROJECT_BINARY_DIR}/sinkgraph.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sinkgraph.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
