// Operators made by the max-autotune fusion passes (src/passes/pattern_fusion.cpp,
// src/passes/fuse_elementwise.cpp). Model code may call them too.
//
//   silu_mul(a, b)                      = mul(silu(a), b), one kernel
//   fused_elementwise([x...], code, c0..c5)
//                                       a tree of elementwise operators, one
//                                       kernel (Note [Fused elementwise programs])
#include <bit>

#include "../kernels/cpu/kernels.h"
#include "../kernels/fused_program.h"
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kSiluMul[] = "silu_mul";
inline constexpr char kFusedElementwise[] = "fused_elementwise";

namespace {

namespace k = kernels::cpu;
namespace fp = kernels::fused;

TensorMeta silu_mul_shape(const ShapeArgs& args) {
  const TensorMeta& a = args.tensors[0];
  const TensorMeta& b = args.tensors[1];
  check_floating(a, kSiluMul, "a");
  check_same_dtype(a, b, kSiluMul, "a", "b");
  return {a.dtype, broadcast_shapes(a.shape, b.shape, kSiluMul), a.device};
}

std::vector<std::int64_t> program_of(const ShapeArgs& args) {
  std::vector<std::int64_t> code;
  for (const SymInt& c : std::get<std::vector<SymInt>>(args.scalars[0])) {
    const auto v = c.maybe_value();
    SG_CHECK(v.has_value(), "fused_elementwise: code must be concrete integers, got ", c.str());
    code.push_back(*v);
  }
  return code;
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

// Slots 0-1: the instruction bytes; slots 2-7: the constants (Note [Fused
// elementwise programs]).
void pack_fused_elementwise(std::span<const ScalarValue> scalars, ArgBlock& block) {
  std::uint64_t words[fp::kCodeSlots] = {};
  const auto& code = std::get<std::vector<SymInt>>(scalars[0]);
  for (std::size_t i = 0; i < code.size(); ++i) {
    const auto byte = static_cast<std::uint64_t>(code[i].value()) & 0xFFU;
    words[i / 8] |= byte << (8 * (i % 8));
  }
  for (int s = 0; s < fp::kCodeSlots; ++s) block.scalars[s].i = std::bit_cast<std::int64_t>(words[s]);
  for (int c = 0; c < fp::kMaxConsts; ++c) {
    block.scalars[fp::kCodeSlots + c].f = std::get<double>(scalars[static_cast<std::size_t>(1 + c)]);
  }
  block.num_scalars = kMaxScalarArgs;
}

}  // namespace

void register_fused_ops(OpRegistry& r) {
  r.add(make_op(kSiluMul, {{"a"}, {"b"}}, silu_mul_shape, k::silu_mul));
  std::vector<ArgSpec> args = {{"inputs", ArgKind::tensor_list}, {"code", ArgKind::int_list}};
  for (int c = 0; c < fp::kMaxConsts; ++c) args.push_back({"c" + std::to_string(c), ArgKind::real});
  OpDef fused = make_op(kFusedElementwise, std::move(args), fused_elementwise_shape,
                        k::fused_elementwise);
  fused.pack_scalars = pack_fused_elementwise;
  r.add(std::move(fused));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor silu_mul(const Tensor& a, const Tensor& b) {
  return call(op_def<detail::kSiluMul>(), {&a, &b});
}

Tensor fused_elementwise(const std::vector<Tensor>& inputs, const std::vector<std::int64_t>& code,
                         const std::vector<double>& consts) {
  SG_CHECK(consts.size() <= static_cast<std::size_t>(kernels::fused::kMaxConsts),
           "fused_elementwise: got ", consts.size(), " constants; expected at most ",
           kernels::fused::kMaxConsts);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  std::vector<ScalarValue> scalars;
  scalars.emplace_back(std::vector<SymInt>(code.begin(), code.end()));
  for (int c = 0; c < kernels::fused::kMaxConsts; ++c) {
    const auto i = static_cast<std::size_t>(c);
    scalars.emplace_back(i < consts.size() ? consts[i] : 0.0);
  }
  return detail::dispatch(op_def<detail::kFusedElementwise>(), ptrs, scalars);
}

}  // namespace ops
}  // namespace sinkgraph
