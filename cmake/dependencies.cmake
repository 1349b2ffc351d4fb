# Every dependency comes from Debian's archive (see .ci/run for the package list).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

# OpenBLAS, single-threaded flavour (Debian's libopenblas-serial-dev). The
# pthread flavour that Debian puts behind the libopenblas alternative starts
# one server thread per core when it loads, whatever openblas_set_num_threads
# says later, and on this project's 2-core machines those threads fought the
# stream worker for the cores: decode steps ran 3-4x slower in half the runs.
# Our kernels run on the stream's worker (intra-op threads are ours, see
# set_num_threads), so BLAS itself stays serial. The library is found by path
# and its folder goes into the RUNPATH, since the soname alone would resolve
# to whichever flavour the alternative points at.
set(SG_OPENBLAS_SERIAL_DIR /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-serial)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-serial
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE} NO_DEFAULT_PATH REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas PATHS ${SG_OPENBLAS_SERIAL_DIR}
             NO_DEFAULT_PATH REQUIRED)
add_library(sg_openblas INTERFACE)
target_include_directories(sg_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(sg_openblas INTERFACE ${OPENBLAS_LIBRARY})

if(SINKGRAPH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SINKGRAPH_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
