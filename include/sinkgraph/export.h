#pragma once
// Public symbols are exported explicitly; the rest of the library is hidden
// (CMAKE_CXX_VISIBILITY_PRESET=hidden), as in MLX.
#define SG_API __attribute__((visibility("default")))
