// Built when SINKGRAPH_CUDA is OFF: no CUDA kernels to register.
#include "../dispatch.h"

namespace sinkgraph::detail {

void register_cuda_kernels(OpRegistry& /*registry*/) {}

}  // namespace sinkgraph::detail
