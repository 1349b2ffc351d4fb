#include "sinkgraph/version.h"

namespace sinkgraph {

namespace {
#define SG_STR2(x) #x
#define SG_STR(x) SG_STR2(x)
constexpr const char* kVersion = SG_STR(SINKGRAPH_VERSION_MAJOR) "." SG_STR(
    SINKGRAPH_VERSION_MINOR) "." SG_STR(SINKGRAPH_VERSION_PATCH);
#undef SG_STR
#undef SG_STR2
}  // namespace

const char* version() { return kVersion; }

}  // namespace sinkgraph
