# Every dependency comes from Debian's archive (see .ci/run for the package list).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)

# OpenBLAS: Debian installs the pthread flavour behind the libopenblas alternative.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas
          PATHS /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
add_library(sg_openblas INTERFACE)
target_include_directories(sg_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(sg_openblas INTERFACE ${OPENBLAS_LIBRARY})

if(SINKGRAPH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SINKGRAPH_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
