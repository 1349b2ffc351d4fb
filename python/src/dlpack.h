#pragma once
// Tensors between torch and sinkgraph without copies, through DLPack's
// C structs (Debian's libdlpack-dev, the ABI torch's to_dlpack/from_dlpack
// speak: a legacy "dltensor" capsule holding a DLManagedTensor).
#include <pybind11/pybind11.h>

#include "sinkgraph/tensor.h"

namespace sinkgraph::python {

// A DLPack capsule's memory as a sinkgraph tensor, borrowed (Note [Borrowed
// memory] in allocator.h): the producer's tensor lives until the last
// sinkgraph storage viewing it dies. Consumes the capsule.
Tensor from_dlpack(pybind11::capsule capsule);

// A capsule viewing a sinkgraph tensor's memory, keeping the tensor alive
// until the consumer's deleter runs. The caller has waited for pending writes.
pybind11::capsule to_dlpack(const Tensor& t);

}  // namespace sinkgraph::python
