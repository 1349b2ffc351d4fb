// Built when SINKGRAPH_CUDA is OFF: no CUDA devices exist. The registry then
// reports cuda as unavailable and device-parameterized tests skip it.
#include "../backends.h"
#include "sinkgraph/error.h"

namespace sinkgraph::cuda_device {

int device_count() { return 0; }

std::unique_ptr<Device> make_device(int index) {
  SG_CHECK(false, "cuda:", index, " is not available: sinkgraph was built without CUDA");
  return nullptr;
}

}  // namespace sinkgraph::cuda_device
