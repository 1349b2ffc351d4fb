// Operators made by the max-autotune fusion passes (src/passes/pattern_fusion.cpp,
// src/passes/fuse_elementwise.cpp). Model code may call them too.
//
//   silu_mul(a, b)                      = mul(silu(a), b), one kernel
//   add_rms_norm(x, r, weight, eps)     = [add(x, r), rms_norm(add(x, r), weight, eps)]
//                                       stacked along a new dim 0, one kernel
//   fused_elementwise([x...], code0..2, c0..c4)
//                                       a tree of elementwise operators, one
//                                       kernel (Note [Fused elementwise programs])
#include "../kernels/fused_program.h"
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kSiluMul[] = "silu_mul";
inline constexpr char kFusedElementwise[] = "fused_elementwise";
inline constexpr char kAddRmsNorm[] = "add_rms_norm";

namespace {

namespace fp = kernels::fused;

TensorMeta silu_mul_shape(const ShapeArgs& args) {
  const TensorMeta& a = args.tensors[0];
  const TensorMeta& b = args.tensors[1];
  check_floating(a, kSiluMul, "a");
  check_same_dtype(a, b, kSiluMul, "a", "b");
  return {a.dtype, broadcast_shapes(a.shape, b.shape, kSiluMul), a.device};
}

// [2, *x.shape]: the sum x + r at index 0 of dim 0, its rms_norm at index 1.
// No broadcasting: the sum is a tensor of its own that later readers see.
TensorMeta add_rms_norm_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  const TensorMeta& r = args.tensors[1];
  check_floating(x, kAddRmsNorm, "x");
  check_same_dtype(x, r, kAddRmsNorm, "x", "r");
  SG_CHECK(x.shape == r.shape, kAddRmsNorm, ": arguments 'x' (", dtype_name(x.dtype),
           shape_str(x.shape), ") and 'r' (", dtype_name(r.dtype), shape_str(r.shape),
           ") must have the same shape (no broadcasting)");
  SG_CHECK(!x.shape.empty() && x.shape.size() < kMaxDims, kAddRmsNorm, ": argument 'x' has shape ",
           shape_str(x.shape), "; expected 1 to ", kMaxDims - 1,
           " dimensions (the result adds a leading dimension of 2)");
  check_norm_weight(x, args.tensors[2], kAddRmsNorm, "weight");
  SG_CHECK(args.real(0) >= 0.0, kAddRmsNorm, ": eps must be >= 0, got ", args.real(0));
  SymShape out = x.shape;
  out.insert(0, SymInt(2));
  return {x.dtype, out, x.device};
}

std::vector<std::int64_t> program_of(const ShapeArgs& args) {
  std::int64_t slots[fp::kCodeSlots];
  for (int i = 0; i < fp::kCodeSlots; ++i) {
    slots[i] = args.integer(i);
    SG_CHECK(slots[i] >= 0 && slots[i] < (std::int64_t{1} << (6 * fp::kInstrPerSlot)),
             "fused_elementwise: code", i, " = ", slots[i], " is not ", fp::kInstrPerSlot,
             " packed 6-bit instructions");
  }
  std::uint8_t code[fp::kMaxCode];
  const int n = fp::unpack_program(slots, code);
  return {code, code + n};
}

TensorMeta fused_elementwise_shape(const ShapeArgs& args) {
  const auto n = static_cast<int>(args.tensors.size());
  SG_CHECK(n >= 1 && n <= fp::kMaxInputs, "fused_elementwise: got ", n,
           " input tensors; expected 1 to ", fp::kMaxInputs);
  const TensorMeta& first = args.tensors[0];
  check_floating(first, kFusedElementwise, "inputs[0]");
  SymShape shape = first.shape;
  for (int i = 1; i < n; ++i) {
    const std::string name = "inputs[" + std::to_string(i) + "]";
    check_same_dtype(first, args.tensors[i], kFusedElementwise, "inputs[0]", name.c_str());
    shape = broadcast_shapes(shape, args.tensors[i].shape, kFusedElementwise);
  }
  const std::string error = fp::check_program(program_of(args), n);
  SG_CHECK(error.empty(), "fused_elementwise: invalid code for ", n, " inputs: ", error);
  return {first.dtype, shape, first.device};
}

}  // namespace

void register_fused_ops(OpRegistry& r) {
  r.add(make_op(kSiluMul, {{"a"}, {"b"}}, silu_mul_shape));
  r.add(
      make_op(kAddRmsNorm, {{"x"}, {"r"}, {"weight"}, {"eps", ArgKind::real}}, add_rms_norm_shape));
  std::vector<ArgSpec> args = {{"inputs", ArgKind::tensor_list}};
  for (int c = 0; c < fp::kCodeSlots; ++c) {
    args.push_back({"code" + std::to_string(c), ArgKind::integer});
  }
  for (int c = 0; c < fp::kMaxConsts; ++c) args.push_back({"c" + std::to_string(c), ArgKind::real});
  r.add(make_op(kFusedElementwise, std::move(args), fused_elementwise_shape));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor silu_mul(const Tensor& a, const Tensor& b) {
  return call(op_def<detail::kSiluMul>(), {&a, &b});
}

Tensor add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps) {
  return call(op_def<detail::kAddRmsNorm>(), {&x, &r, &weight}, {eps});
}

Tensor fused_elementwise(const std::vector<Tensor>& inputs, const std::vector<std::int64_t>& code,
                         const std::vector<double>& consts) {
  SG_CHECK(consts.size() <= static_cast<std::size_t>(kernels::fused::kMaxConsts),
           "fused_elementwise: got ", consts.size(), " constants; expected at most ",
           kernels::fused::kMaxConsts);
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  namespace fp = kernels::fused;
  SG_CHECK(code.size() <= static_cast<std::size_t>(fp::kMaxCode),
           "fused_elementwise: the program has ", code.size(), " instructions; expected 1 to ",
           fp::kMaxCode);
  for (std::size_t i = 0; i < code.size(); ++i) {
    SG_CHECK(code[i] > 0 && code[i] < 64, "fused_elementwise: instruction ", i, " (", code[i],
             ") is not opcode*8+arg with opcode 1..6 and arg 0..7");
  }
  std::int64_t slots[fp::kCodeSlots];
  fp::pack_program(code, slots);
  std::vector<ScalarValue> scalars;
  for (const std::int64_t s : slots) scalars.emplace_back(SymInt(s));
  for (int c = 0; c < kernels::fused::kMaxConsts; ++c) {
    const auto i = static_cast<std::size_t>(c);
    scalars.emplace_back(i < consts.size() ? consts[i] : 0.0);
  }
  return detail::dispatch(op_def<detail::kFusedElementwise>(), ptrs, scalars);
}

}  // namespace ops
}  // namespace sinkgraph
