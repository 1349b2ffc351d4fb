#pragma once
// The eager dispatcher (internal): validate, infer, allocate, launch.
#include <array>
#include <initializer_list>
#include <span>
#include <vector>

#include "sinkgraph/op_registry.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::detail {

// Runs `op` eagerly on the current stream of the inputs' device. `tensors`
// and `scalars` are in schema order. Returns the output: fresh, a view, or the
// mutated input of an in-place operator. `out`: a placed output (Note
// [Output placement] in op_registry.h).
Tensor dispatch(const OpDef& op, std::span<const Tensor* const> tensors,
                std::span<const ScalarValue> scalars, const Tensor* placed = nullptr);

// Validation and shape inference alone (composite operators use it).
struct Inferred {
  Device* device = nullptr;
  TensorMeta out;
  ShapeArgs args;
  std::array<TensorMeta, 4> inline_metas;
  std::vector<TensorMeta> heap_metas;
  Inferred() = default;
  Inferred(const Inferred&) = delete;
  Inferred& operator=(const Inferred&) = delete;
};
void infer(const OpDef& op, std::span<const Tensor* const> tensors,
           std::span<const ScalarValue> scalars, Inferred& r);

inline Tensor call(const OpDef& op, std::initializer_list<const Tensor*> tensors,
                   std::initializer_list<ScalarValue> scalars = {}) {
  return dispatch(op, std::span<const Tensor* const>(tensors.begin(), tensors.size()),
                  std::span<const ScalarValue>(scalars.begin(), scalars.size()));
}

// The definition of the operator named `Name`, looked up once.
template <const char* Name>
const OpDef& op_def() {
  static const OpDef& def = OpRegistry::instance().get(Name);
  return def;
}

// An OpDef without kernels: backends register those (OpRegistry::set_kernel).
OpDef make_op(const char* name, std::vector<ArgSpec> args, ShapeFn shape, OpTraits traits = {});

// Shape-function helpers: each throws sinkgraph::Error naming op and argument.
void check_floating(const TensorMeta& t, const char* op, const char* arg);
void check_same_dtype(const TensorMeta& a, const TensorMeta& b, const char* op, const char* arg_a,
                      const char* arg_b);
void check_rank(const TensorMeta& t, int rank, const char* op, const char* arg);
void check_dim(const SymInt& got, const SymInt& expected, const char* op, const char* what);
// A norm's weight (or bias) `arg`: x's dtype, 1-D, of x's last dimension.
void check_norm_weight(const TensorMeta& x, const TensorMeta& w, const char* op, const char* arg);

// Registration of each operator family (called once by the registry).
void register_elementwise_ops(OpRegistry& registry);
void register_nn_ops(OpRegistry& registry);
void register_shape_ops(OpRegistry& registry);
void register_memory_ops(OpRegistry& registry);
void register_collective_ops(OpRegistry& registry);
void register_fused_ops(OpRegistry& registry);
void register_vision_ops(OpRegistry& registry);
void register_reduce_ops(OpRegistry& registry);
// Kernels of each backend (src/ops/backends/), registered after the operators.
void register_cpu_kernels(OpRegistry& registry);
void register_cuda_kernels(OpRegistry& registry);

}  // namespace sinkgraph::detail
