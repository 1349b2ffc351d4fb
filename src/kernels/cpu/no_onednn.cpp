// A build without oneDNN (SINKGRAPH_ONEDNN=OFF): conv2d keeps its own paths
// (Note [Convolutions through oneDNN] in onednn.h).
#include "onednn.h"

namespace sinkgraph::kernels::cpu::onednn {

bool built() { return false; }
void set_enabled(bool /*enabled*/) {}
bool enabled() { return false; }
std::uint64_t calls() { return 0; }
bool conv2d(const ArgBlock& /*args*/, KernelContext& /*ctx*/) { return false; }

}  // namespace sinkgraph::kernels::cpu::onednn
