# Sanitizer presets: 'address' turns on ASan + UBSan, 'thread' turns on TSan.
#
# Note [Sanitizer build flags]: the asan and tsan presets build RelWithDebInfo
# with -O1 -g1 (CMakePresets.json), not CMake's -O2 -g. -O1 is what the
# sanitizers' own documentation recommends, and line tables (-g1) are all
# their reports need (function, file and line in every frame). GCC 12 with
# ASan+UBSan at -O2 -g compiles our larger translation units twice as slowly,
# which alone pushed a cold CI run past its time limit; the optimisation level
# changes which inlining happens, not what the sanitizers check.
#
# UBSan instruments the product (src/, tools/, the benchmarks when built);
# the tests' own code is built with ASan alone (tests/CMakeLists.txt). UBSan
# checks the code it compiles, so the library's arithmetic, shifts, casts and
# bounds stay checked under every test; what it no longer checks is the
# tests' own code, at half the cost of compiling the suite under ASan+UBSan.
if(SINKGRAPH_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(SINKGRAPH_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT SINKGRAPH_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SINKGRAPH_SANITIZE must be '', 'address' or 'thread', got '${SINKGRAPH_SANITIZE}'")
endif()

# GCC's flow-based warnings are unreliable under sanitizer instrumentation (GCC
# says so itself for -Wmaybe-uninitialized); with GCC 12 they fire inside
# libstdc++ (std::regex, vector growth). Under the sanitizer presets they stay
# warnings; the release and debug presets keep them as errors.
if(NOT SINKGRAPH_SANITIZE STREQUAL "" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-error=maybe-uninitialized -Wno-error=stringop-overflow
                      -Wno-error=array-bounds -Wno-error=restrict)
endif()
