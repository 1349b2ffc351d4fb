#pragma once
// The libtorch fallback (Note [The libtorch fallback] in torch_fallback.cpp).
#include <pybind11/pybind11.h>

namespace sinkgraph::python {

// Registers the `torch_fallback` operator and its CPU kernel, and binds
// _C.register_torch_fallback.
void bind_torch_fallback(pybind11::module_& m);

}  // namespace sinkgraph::python
