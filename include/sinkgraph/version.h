#pragma once
// sinkgraph's version. The macros are the one place it is written: the
// top-level CMakeLists.txt reads them for project(VERSION), the library's
// SONAME, the CMake package's version file and sinkgraph.pc.
//
// Compatibility: while the major version is 0, a minor release may change the
// ABI, so the SONAME carries major.minor (libsinkgraph.so.0.2); the public C++
// API stays source-compatible (DESIGN.md, "Conventions").
#include "sinkgraph/export.h"

#define SINKGRAPH_VERSION_MAJOR 0
#define SINKGRAPH_VERSION_MINOR 2
#define SINKGRAPH_VERSION_PATCH 0

namespace sinkgraph {

// "X.Y.Z" of the library actually loaded (which may differ from the header a
// program was compiled against: compare with the macros to detect that).
SG_API const char* version();

}  // namespace sinkgraph
