// A build without oneDNN (SINKGRAPH_ONEDNN=OFF): conv2d and the products keep their own paths
// (Note [Convolutions through oneDNN] in onednn.h).
#include "onednn.h"

namespace sinkgraph::kernels::cpu::onednn {

bool built() { return false; }
void set_enabled(bool /*enabled*/) {}
bool enabled() { return false; }
std::uint64_t calls() { return 0; }
bool conv2d(const ArgBlock& /*args*/, KernelContext& /*ctx*/) { return false; }
std::uint64_t matmul_calls() { return 0; }
bool rows_in_any_order() { return false; }
bool matmul(const float* /*w*/, std::int64_t /*wn*/, std::int64_t /*wk*/, const float* /*x*/,
            std::int64_t /*ldx*/, float* /*out*/, std::int64_t /*ldo*/, std::int64_t /*m*/,
            std::int64_t /*n*/, std::int64_t /*k*/, KernelContext& /*ctx*/,
            bool /*on_this_thread*/) {
  return false;
}

}  // namespace sinkgraph::kernels::cpu::onednn
