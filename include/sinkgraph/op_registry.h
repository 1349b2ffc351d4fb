#pragma once
// The operator registry. An operator has ONE definition: its schema, a shape
// function over symbolic shapes and its traits (Note [Operator traits]). The
// eager dispatcher, the IR verifier, the tracer and the passes all read the
// same definition. Kernels are not part of it: each backend registers its
// kernels for the operators it implements (OpRegistry::set_kernel; the CPU
// backend's list is src/kernels/cpu/registration.cpp).
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sinkgraph/device.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/export.h"
#include "sinkgraph/kernel_abi.h"
#include "sinkgraph/shape.h"
#include "sinkgraph/symint.h"

namespace sinkgraph {

class Tensor;

enum class ArgKind : std::uint8_t { tensor, tensor_list, integer, real, boolean, int_list, dtype };

struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::tensor;
  // A scalar the kernel reads at run time that never determines a shape or an
  // allocation: a captured graph patches it per replay (Note [Kernel ABI]).
  bool updatable = false;
  bool mutated = false;  // tensors written in place
};

struct OpSchema {
  std::string name;
  std::vector<ArgSpec> args;
  // Output 0 aliases this input (a view, or the mutated input of an in-place op); -1: fresh.
  int alias_of = -1;
  bool is_view = false;  // metadata-only: no kernel runs
};

// A non-tensor argument value as shape functions see it.
using ScalarValue = std::variant<SymInt, double, bool, std::vector<SymInt>, DType>;

struct TensorMeta {
  DType dtype = DType::f32;
  SymShape shape;
  DeviceType device = DeviceType::cpu;
};

// What a shape function receives: tensor metas and scalar values, each in
// schema order (a tensor_list contributes every element to `tensors`).
struct ShapeArgs {
  std::span<const TensorMeta> tensors;
  std::span<const ScalarValue> scalars;
  [[nodiscard]] const SymInt& sym(int i) const { return std::get<SymInt>(scalars[i]); }
  [[nodiscard]] std::int64_t integer(int i) const { return sym(i).value(); }
  [[nodiscard]] double real(int i) const { return std::get<double>(scalars[i]); }
};

using ShapeFn = TensorMeta (*)(const ShapeArgs& args);
// Computes a view's (shape, strides, offset) on the host from its input's.
struct ViewResult {
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;
};
using ViewFn = ViewResult (*)(const Shape& shape, const Strides& strides, std::int64_t offset,
                              const ShapeArgs& args);

// Operators without a kernel of their own run as a composite of others
// (cat: one copy per input into slices of its output).
using CompositeFn = Tensor (*)(std::span<const Tensor* const> tensors,
                               std::span<const ScalarValue> scalars);
// The same, writing into a placed output (Note [Output placement]), already checked.
using CompositeIntoFn = Tensor (*)(std::span<const Tensor* const> tensors,
                                   std::span<const ScalarValue> scalars, const Tensor& out);

// Note [Operator traits]
// Facts about an operator that passes need, kept in its definition rather
// than in lists inside the passes (which drift: constant folding once lacked
// erf). `pointwise` says each output element is a function of the input
// elements at the same (broadcast) index and nothing else: such an operator
// may be folded over constants, may write its result over an input that dies
// (inplace_pass, input_inplace_pass), and is fused by fuse_elementwise, which
// emits it as `pointwise_fn` in a fused program (Note [Fused elementwise
// programs]: a UnaryFn or BinaryFn index, unused by the scalar forms).
//
// `collective` marks an operator that exchanges data with other processes
// (Note [Collectives] in sinkgraph/collectives.h): every rank must run the
// same ones in the same order, so no pass merges or fuses one.
enum class Pointwise : std::uint8_t { none, unary, binary, add_scalar, mul_scalar };

struct OpTraits {
  Pointwise pointwise = Pointwise::none;
  int pointwise_fn = -1;
  bool collective = false;
};

// Note [Kernel scalars]
// A kernel's scalar slots are, by default, the schema's non-list scalars in
// schema order (Note [Kernel ABI]; lists shape the output and never reach a
// kernel). An operator whose kernel needs something else packs its own slots
// with `kernel_scalars`, from the same arguments its shape function sees, and
// returns how many it filled (at most kMaxScalarArgs): mean passes its `dims`
// list as a bit mask; max_pool2d has nine scalars and its kernel reads eight
// (ceil_mode only sizes the output). Such an operator has no updatable
// argument (OpRegistry::add checks): a captured graph patches an updatable
// scalar at its schema slot.
using KernelScalarsFn = int (*)(const ShapeArgs& args, ScalarArg* slots);

// Note [Operator emitters]
// How max-autotune's code generation writes an operator as C++ (src/codegen/,
// Note [Generated regions]): the code generator is a backend, so like kernels
// its emitters are registered per operator (OpRegistry::set_emitter) and read
// from the operator's one definition. An emitter appends a loop nest that
// computes the output from the inputs, specialised to their concrete shapes
// and strides. Tensors are named by C++ expressions of pointer type (already
// offset to the first element); strides are in elements. A scalar is a C++
// expression: a literal for a value fixed in the graph key, or a read of the
// region's runtime slots for an updatable one. A check that only run time can
// do (an id out of range) writes its message with `fail` and returns from the
// region. An emitter returns false when it cannot write these arguments (a
// dtype or layout it does not handle): the region then ends before the node,
// which runs its ordinary kernel.
struct EmitTensor {
  std::string ptr;  // a `float*` (or `const std::int64_t*`, ...) expression
  DType dtype = DType::f32;
  Shape shape;
  Strides strides;
};
struct EmitScalar {
  std::string expr;  // C++ expression: "1e-05", "64", "s[0]"
  bool runtime = false;
};
struct EmitArgs {
  std::string_view op;  // for error messages
  std::span<const EmitTensor> inputs;
  const EmitTensor* out = nullptr;  // for in-place operators, the mutated input
  std::span<const EmitScalar> scalars;
  std::string prefix;  // unique per node: names of locals start with it
};
// Appends code to `out`. `fail(msg)` is a C++ statement template: emitters
// write `SG_FAIL("...")` and the region defines it.
using EmitFn = bool (*)(const EmitArgs& args, std::string& out);

struct OpDef {
  OpSchema schema;
  OpTraits traits;
  ShapeFn shape_fn = nullptr;
  ViewFn view_fn = nullptr;  // views only
  CompositeFn composite = nullptr;
  CompositeIntoFn composite_into = nullptr;  // composites that accept a placed output
  KernelScalarsFn kernel_scalars = nullptr;  // Note [Kernel scalars]; null: the schema's
  std::array<KernelFn, kNumDeviceTypes> kernels{};
  EmitFn emit = nullptr;  // Note [Operator emitters]; null: no code generation
};

class SG_API OpRegistry {
 public:
  static OpRegistry& instance();
  // Throws sinkgraph::Error for an unknown name.
  [[nodiscard]] const OpDef& get(std::string_view name) const;
  [[nodiscard]] const OpDef* find(std::string_view name) const;
  [[nodiscard]] std::vector<std::string> names() const;
  void add(OpDef def);
  // A backend's kernel for `name` on `device`: registered once, before any
  // call (backends register while the registry is built; the Python
  // extension registers its libtorch kernels at import). Throws
  // sinkgraph::Error for an unknown operator, a view or composite (they run
  // no kernel of their own), or a second kernel for the same device.
  void set_kernel(std::string_view name, DeviceType device, KernelFn kernel);
  // The code generator's emitter for `name` (Note [Operator emitters]); same
  // rules as set_kernel.
  void set_emitter(std::string_view name, EmitFn emit);

 private:
  OpRegistry();
  std::vector<OpDef> ops_;
};

// Note [Output placement]
// The dispatcher normally allocates a fresh operator's output. A caller that
// chose the memory ahead of time (the IR interpreter, for in-place reuse, cat
// removal and memory planning) passes it as `out`: the operator writes there
// and returns it. `out` must have exactly the shape and dtype the shape
// function infers (any strides: the kernel ABI takes strided outputs), else
// sinkgraph::Error; views and in-place operators, whose result is an input's
// memory by definition, reject a placement. The operator's kernel must read
// each input element before it writes the output element at the same index
// when `out` shares memory with an input (elementwise kernels do); choosing
// such a placement is the caller's responsibility (docs/architecture.md,
// "max-autotune passes").

// Runs `op` eagerly, exactly as the ops:: functions do: the generic entry
// point the IR interpreter uses. `tensors` and `scalars` are in schema order;
// `out`, when not null, is where the output goes (Note [Output placement]).
SG_API Tensor run_op(const OpDef& op, std::span<const Tensor* const> tensors,
                     std::span<const ScalarValue> scalars, const Tensor* out = nullptr);

// A per-thread hook that sees every operator call before it runs (the tracer
// records calls instead of running them). set returns the previous hook.
class SG_API DispatchInterceptor {
 public:
  virtual ~DispatchInterceptor() = default;
  virtual Tensor intercept(const OpDef& op, std::span<const Tensor* const> tensors,
                           std::span<const ScalarValue> scalars) = 0;
};
SG_API DispatchInterceptor* set_dispatch_interceptor(DispatchInterceptor* interceptor);
SG_API DispatchInterceptor* dispatch_interceptor();

// Counters of host-side work, for tests that prove replay does none of it.
struct DispatchCounters {
  std::uint64_t dispatches = 0;  // eager operator calls
  std::uint64_t shape_fns = 0;   // shape-function evaluations
  std::uint64_t launches = 0;    // kernels launched by the dispatcher
};
SG_API DispatchCounters dispatch_counters();

}  // namespace sinkgraph
