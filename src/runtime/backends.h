#pragma once
// Backend entry points. Which translation units provide them is decided in
// CMake: src/runtime/cuda/no_cuda.cpp when CUDA is off.
#include <memory>

#include "sinkgraph/device.h"

namespace sinkgraph::cpu_device {
std::unique_ptr<Device> make_device();
}  // namespace sinkgraph::cpu_device

namespace sinkgraph::cuda_device {
int device_count();
std::unique_ptr<Device> make_device(int index);
}  // namespace sinkgraph::cuda_device
