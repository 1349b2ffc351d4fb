// Elementwise operators: binary with broadcasting, scalar and unary forms.
#include "../kernels/fused_program.h"
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kAdd[] = "add";
inline constexpr char kSub[] = "sub";
inline constexpr char kMul[] = "mul";
inline constexpr char kDiv[] = "div";
inline constexpr char kAddScalar[] = "add_scalar";
inline constexpr char kMulScalar[] = "mul_scalar";
inline constexpr char kNeg[] = "neg";
inline constexpr char kExp[] = "exp";
inline constexpr char kSqrt[] = "sqrt";
inline constexpr char kRsqrt[] = "rsqrt";
inline constexpr char kErf[] = "erf";
inline constexpr char kRelu[] = "relu";
inline constexpr char kSilu[] = "silu";
inline constexpr char kGelu[] = "gelu";
inline constexpr char kTanh[] = "tanh";
inline constexpr char kSigmoid[] = "sigmoid";
inline constexpr char kHardswish[] = "hardswish";
inline constexpr char kHardsigmoid[] = "hardsigmoid";
inline constexpr char kCos[] = "cos";
inline constexpr char kSin[] = "sin";
inline constexpr char kWhere[] = "where";
inline constexpr char kCompare[] = "compare";

namespace {

template <const char* Name>
TensorMeta binary_shape(const ShapeArgs& args) {
  const TensorMeta& a = args.tensors[0];
  const TensorMeta& b = args.tensors[1];
  check_same_dtype(a, b, Name, "a", "b");
  SG_CHECK(a.dtype != DType::boolean && a.dtype != DType::u8, Name, ": ", dtype_name(a.dtype),
           " tensors are not supported (a: ", dtype_name(a.dtype), shape_str(a.shape), ")");
  return {a.dtype, broadcast_shapes(a.shape, b.shape, Name), a.device};
}

template <const char* Name>
TensorMeta float_unary_shape(const ShapeArgs& args) {
  check_floating(args.tensors[0], Name, "x");
  return args.tensors[0];
}

// where(cond, a, b): cond bool, a and b of one dtype, all three broadcast.
TensorMeta where_shape(const ShapeArgs& args) {
  const TensorMeta& cond = args.tensors[0];
  const TensorMeta& a = args.tensors[1];
  const TensorMeta& b = args.tensors[2];
  SG_CHECK(cond.dtype == DType::boolean, "where: cond must be bool, got ", dtype_name(cond.dtype),
           shape_str(cond.shape));
  check_same_dtype(a, b, kWhere, "a", "b");
  const SymShape ab = broadcast_shapes(a.shape, b.shape, kWhere);
  return {a.dtype, broadcast_shapes(cond.shape, ab, kWhere), a.device};
}

// compare(a, b, op): a and b of one dtype, broadcast; a bool result.
TensorMeta compare_shape(const ShapeArgs& args) {
  const TensorMeta& a = args.tensors[0];
  const TensorMeta& b = args.tensors[1];
  check_same_dtype(a, b, kCompare, "a", "b");
  SG_CHECK(a.dtype != DType::u8, "compare: u8 tensors are not supported (a: u8", shape_str(a.shape),
           ")");
  const std::int64_t op = args.integer(0);
  SG_CHECK(op >= 0 && op <= static_cast<std::int64_t>(ops::Comparison::ge),
           "compare: op must be 0 (eq) to 5 (ge), got ", op);
  return {DType::boolean, broadcast_shapes(a.shape, b.shape, kCompare), a.device};
}

TensorMeta div_shape(const ShapeArgs& args) {
  check_floating(args.tensors[0], kDiv, "a");
  return binary_shape<kDiv>(args);
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  namespace fp = kernels::fused;
  const ArgSpec a{"a"}, b{"b"}, x{"x"};
  const ArgSpec value{"value", ArgKind::real};
  // Every operator here is pointwise (Note [Operator traits]); its trait says
  // how a fused program computes it.
  const auto binary = [](int fn) { return OpTraits{Pointwise::binary, fn}; };
  const auto unary = [](int fn) { return OpTraits{Pointwise::unary, fn}; };
  r.add(make_op(kAdd, {a, b}, binary_shape<kAdd>, binary(fp::kAdd)));
  r.add(make_op(kSub, {a, b}, binary_shape<kSub>, binary(fp::kSub)));
  r.add(make_op(kMul, {a, b}, binary_shape<kMul>, binary(fp::kMul)));
  r.add(make_op(kDiv, {a, b}, div_shape, binary(fp::kDiv)));
  r.add(make_op(kAddScalar, {x, value}, float_unary_shape<kAddScalar>, {Pointwise::add_scalar}));
  r.add(make_op(kMulScalar, {x, value}, float_unary_shape<kMulScalar>, {Pointwise::mul_scalar}));
  r.add(make_op(kNeg, {x}, float_unary_shape<kNeg>, unary(fp::kNeg)));
  r.add(make_op(kExp, {x}, float_unary_shape<kExp>, unary(fp::kExp)));
  r.add(make_op(kSqrt, {x}, float_unary_shape<kSqrt>, unary(fp::kSqrt)));
  r.add(make_op(kRsqrt, {x}, float_unary_shape<kRsqrt>, unary(fp::kRsqrt)));
  r.add(make_op(kErf, {x}, float_unary_shape<kErf>, unary(fp::kErf)));
  r.add(make_op(kRelu, {x}, float_unary_shape<kRelu>, unary(fp::kRelu)));
  r.add(make_op(kSilu, {x}, float_unary_shape<kSilu>, unary(fp::kSilu)));
  r.add(make_op(kGelu, {x}, float_unary_shape<kGelu>, unary(fp::kGelu)));
  r.add(make_op(kTanh, {x}, float_unary_shape<kTanh>, unary(fp::kTanh)));
  r.add(make_op(kSigmoid, {x}, float_unary_shape<kSigmoid>, unary(fp::kSigmoid)));
  r.add(make_op(kHardswish, {x}, float_unary_shape<kHardswish>, unary(fp::kHardswish)));
  r.add(make_op(kHardsigmoid, {x}, float_unary_shape<kHardsigmoid>, unary(fp::kHardsigmoid)));
  r.add(make_op(kCos, {x}, float_unary_shape<kCos>, unary(fp::kCos)));
  r.add(make_op(kSin, {x}, float_unary_shape<kSin>, unary(fp::kSin)));
  // Not pointwise in the traits' sense (fusion takes float chains only).
  r.add(make_op(kWhere, {{"cond"}, a, b}, where_shape));
  r.add(make_op(kCompare, {a, b, {"op", ArgKind::integer}}, compare_shape));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor add(const Tensor& a, const Tensor& b) { return call(op_def<detail::kAdd>(), {&a, &b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call(op_def<detail::kSub>(), {&a, &b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call(op_def<detail::kMul>(), {&a, &b}); }
Tensor div(const Tensor& a, const Tensor& b) { return call(op_def<detail::kDiv>(), {&a, &b}); }
Tensor add_scalar(const Tensor& x, double value) {
  return call(op_def<detail::kAddScalar>(), {&x}, {value});
}
Tensor mul_scalar(const Tensor& x, double value) {
  return call(op_def<detail::kMulScalar>(), {&x}, {value});
}
Tensor neg(const Tensor& x) { return call(op_def<detail::kNeg>(), {&x}); }
Tensor exp(const Tensor& x) { return call(op_def<detail::kExp>(), {&x}); }
Tensor sqrt(const Tensor& x) { return call(op_def<detail::kSqrt>(), {&x}); }
Tensor rsqrt(const Tensor& x) { return call(op_def<detail::kRsqrt>(), {&x}); }
Tensor erf(const Tensor& x) { return call(op_def<detail::kErf>(), {&x}); }
Tensor relu(const Tensor& x) { return call(op_def<detail::kRelu>(), {&x}); }
Tensor silu(const Tensor& x) { return call(op_def<detail::kSilu>(), {&x}); }
Tensor gelu(const Tensor& x) { return call(op_def<detail::kGelu>(), {&x}); }
Tensor tanh(const Tensor& x) { return call(op_def<detail::kTanh>(), {&x}); }
Tensor sigmoid(const Tensor& x) { return call(op_def<detail::kSigmoid>(), {&x}); }
Tensor hardswish(const Tensor& x) { return call(op_def<detail::kHardswish>(), {&x}); }
Tensor hardsigmoid(const Tensor& x) { return call(op_def<detail::kHardsigmoid>(), {&x}); }
Tensor cos(const Tensor& x) { return call(op_def<detail::kCos>(), {&x}); }
Tensor sin(const Tensor& x) { return call(op_def<detail::kSin>(), {&x}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return call(op_def<detail::kWhere>(), {&cond, &a, &b});
}
Tensor compare(const Tensor& a, const Tensor& b, Comparison op) {
  return call(op_def<detail::kCompare>(), {&a, &b}, {SymInt(static_cast<std::int64_t>(op))});
}

}  // namespace ops
}  // namespace sinkgraph
