// Vision operators over NCHW tensors: conv2d, inference batch_norm and
// max_pool2d, with PyTorch's semantics (they back aten.convolution,
// aten._native_batch_norm_legit_no_training and aten.max_pool2d).
#include "../kernels/fused_program.h"
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kConv2d[] = "conv2d";
inline constexpr char kBatchNorm[] = "batch_norm";
inline constexpr char kMaxPool2d[] = "max_pool2d";

namespace {

std::string pair_str(std::int64_t a, std::int64_t b) { return concat("(", a, ", ", b, ")"); }

// One spatial output size of a convolution or pooling window, floor mode:
// floor((in + 2 * pad - dil * (k - 1) - 1) / stride) + 1, checked >= 1 when
// concrete (the dilated window must fit the padded input).
SymInt window_output(const char* op, const char* dim, const SymInt& in, const SymInt& k,
                     std::int64_t stride, std::int64_t pad, std::int64_t dil, const TensorMeta& x) {
  const SymInt span = SymInt(dil) * (k - SymInt(1)) + SymInt(1);
  const SymInt padded = in + SymInt(2 * pad);
  if (const auto p = padded.maybe_value(), s = span.maybe_value(); p && s) {
    SG_CHECK(*s <= *p, op, ": the dilated kernel spans ", *s, " along ", dim,
             " but the padded input has only ", *p, " (x", shape_str(x.shape), ", padding ", pad,
             ", dilation ", dil, ")");
  }
  return floordiv(padded - span, SymInt(stride)) + SymInt(1);
}

TensorMeta conv2d_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  const TensorMeta& w = args.tensors[1];
  const TensorMeta& b = args.tensors[2];
  SG_CHECK(x.dtype == DType::f32, "conv2d: x has dtype ", dtype_name(x.dtype), " (shape ",
           shape_str(x.shape), "); only f32 is supported");
  check_same_dtype(x, w, kConv2d, "x", "w");
  check_same_dtype(x, b, kConv2d, "x", "b");
  SG_CHECK(x.shape.size() == 4, "conv2d: x", shape_str(x.shape), " must be 4-D [N, C, H, W]");
  SG_CHECK(w.shape.size() == 4, "conv2d: w", shape_str(w.shape),
           " must be 4-D [O, C/groups, KH, KW]");
  const std::int64_t sh = args.integer(0), sw = args.integer(1);
  const std::int64_t ph = args.integer(2), pw = args.integer(3);
  const std::int64_t dh = args.integer(4), dw = args.integer(5);
  const std::int64_t groups = args.integer(6), act = args.integer(7);
  SG_CHECK(sh >= 1 && sw >= 1, "conv2d: stride must be >= 1, got ", pair_str(sh, sw));
  SG_CHECK(ph >= 0 && pw >= 0, "conv2d: padding must be >= 0, got ", pair_str(ph, pw));
  SG_CHECK(dh >= 1 && dw >= 1, "conv2d: dilation must be >= 1, got ", pair_str(dh, dw));
  SG_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  SG_CHECK(act >= -1 && act < kernels::fused::kNumUnary, "conv2d: activation ", act,
           " is neither -1 (none) nor a unary function index in [0, ", kernels::fused::kNumUnary,
           ")");
  const SymInt& c = x.shape[1];
  const SymInt& o = w.shape[0];
  SG_CHECK(w.shape[1] * SymInt(groups) == c, "conv2d: with groups=", groups, ", w",
           shape_str(w.shape), " expects x to have ", (w.shape[1] * SymInt(groups)).str(),
           " channels, but x", shape_str(x.shape), " has ", c.str());
  if (const auto ov = o.maybe_value()) {
    SG_CHECK(*ov % groups == 0, "conv2d: the ", *ov, " output channels of w", shape_str(w.shape),
             " are not divisible by groups=", groups);
  }
  for (int i = 2; i < 4; ++i) {
    const auto k = w.shape[i].maybe_value();
    SG_CHECK(!k || *k >= 1, "conv2d: w", shape_str(w.shape), " has an empty kernel");
  }
  SG_CHECK(b.shape.size() == 1 && b.shape[0] == o, "conv2d: b", shape_str(b.shape),
           " must be 1-D [O] with O=", o.str(), " (w", shape_str(w.shape), ")");
  const SymInt oh = window_output(kConv2d, "H", x.shape[2], w.shape[2], sh, ph, dh, x);
  const SymInt ow = window_output(kConv2d, "W", x.shape[3], w.shape[3], sw, pw, dw, x);
  return {x.dtype, SymShape{x.shape[0], o, oh, ow}, x.device};
}

TensorMeta batch_norm_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kBatchNorm, "x");
  SG_CHECK(x.shape.size() >= 2, "batch_norm: x", shape_str(x.shape),
           " must have at least 2 dimensions [N, C, ...]");
  const char* names[] = {"mean", "var", "weight", "bias"};
  for (int i = 0; i < 4; ++i) {
    const TensorMeta& p = args.tensors[i + 1];
    check_same_dtype(x, p, kBatchNorm, "x", names[i]);
    SG_CHECK(p.shape.size() == 1 && p.shape[0] == x.shape[1], "batch_norm: ", names[i],
             shape_str(p.shape), " must be 1-D [C] with C=", x.shape[1].str(),
             " (x's dimension 1, x", shape_str(x.shape), ")");
  }
  SG_CHECK(args.real(0) >= 0.0, "batch_norm: eps must be >= 0, got ", args.real(0));
  return x;
}

// PyTorch's pooling_output_shape: floor or ceil of the window count; in
// ceil mode the last window must start inside the input or its left padding.
SymInt pool_output(const char* dim, const SymInt& in, std::int64_t k, std::int64_t stride,
                   std::int64_t pad, std::int64_t dil, bool ceil_mode, const TensorMeta& x) {
  const std::int64_t extra = 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  if (!ceil_mode) return floordiv(in + SymInt(extra), SymInt(stride)) + SymInt(1);
  const auto n = in.maybe_value();
  SG_CHECK(n.has_value(), "max_pool2d: ceil_mode needs a concrete input size, but ", dim, " of x",
           shape_str(x.shape), " is ", in.str());
  const std::int64_t numer = *n + extra;
  std::int64_t out = (numer >= 0 ? numer / stride : -((-numer + stride - 1) / stride)) + 1;
  if ((out - 1) * stride >= *n + pad) --out;
  return SymInt(out);
}

TensorMeta max_pool2d_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kMaxPool2d, "x");
  const int nd = x.shape.size();
  SG_CHECK(nd == 3 || nd == 4, "max_pool2d: x", shape_str(x.shape),
           " must be 3-D [C, H, W] or 4-D [N, C, H, W]");
  for (int i = nd - 3; i < nd; ++i) {
    const auto d = x.shape[i].maybe_value();
    SG_CHECK(!d || *d > 0, "max_pool2d: x", shape_str(x.shape),
             " has an empty dimension other than the batch");
  }
  const std::int64_t kh = args.integer(0), kw = args.integer(1);
  const std::int64_t sh = args.integer(2), sw = args.integer(3);
  const std::int64_t ph = args.integer(4), pw = args.integer(5);
  const std::int64_t dh = args.integer(6), dw = args.integer(7);
  const bool ceil_mode = std::get<bool>(args.scalars[8]);
  SG_CHECK(kh >= 1 && kw >= 1, "max_pool2d: kernel size must be >= 1, got ", pair_str(kh, kw));
  SG_CHECK(sh >= 1 && sw >= 1, "max_pool2d: stride must be >= 1, got ", pair_str(sh, sw));
  SG_CHECK(dh >= 1 && dw >= 1, "max_pool2d: dilation must be >= 1, got ", pair_str(dh, dw));
  SG_CHECK(ph >= 0 && pw >= 0, "max_pool2d: padding must be >= 0, got ", pair_str(ph, pw));
  SG_CHECK(ph <= kh / 2 && pw <= kw / 2,
           "max_pool2d: padding must be at most half the kernel size, got padding ",
           pair_str(ph, pw), " for kernel ", pair_str(kh, kw));
  TensorMeta out = x;
  out.shape[nd - 2] = pool_output("H", x.shape[nd - 2], kh, sh, ph, dh, ceil_mode, x);
  out.shape[nd - 1] = pool_output("W", x.shape[nd - 1], kw, sw, pw, dw, ceil_mode, x);
  for (int i = nd - 2; i < nd; ++i) {
    const auto d = out.shape[i].maybe_value();
    SG_CHECK(!d || *d >= 1, "max_pool2d: the output", shape_str(out.shape), " of x",
             shape_str(x.shape), " is empty: the window (kernel ", pair_str(kh, kw), ", dilation ",
             pair_str(dh, dw), ", padding ", pair_str(ph, pw), ") does not fit the input");
  }
  return out;
}

// Note [Kernel scalars]: the kernel reads the eight window sizes; ceil_mode
// (the ninth) only sized the output.
int max_pool2d_scalars(const ShapeArgs& args, ScalarArg* slots) {
  for (int i = 0; i < 8; ++i) slots[i].i = args.integer(i);
  return 8;
}

}  // namespace

void register_vision_ops(OpRegistry& r) {
  const ArgSpec x{"x"};
  const auto integer = [](const char* name) { return ArgSpec{name, ArgKind::integer}; };
  r.add(make_op(kConv2d,
                {x,
                 {"w"},
                 {"b"},
                 integer("stride_h"),
                 integer("stride_w"),
                 integer("pad_h"),
                 integer("pad_w"),
                 integer("dil_h"),
                 integer("dil_w"),
                 integer("groups"),
                 integer("activation")},
                conv2d_shape));
  r.add(make_op(kBatchNorm, {x, {"mean"}, {"var"}, {"weight"}, {"bias"}, {"eps", ArgKind::real}},
                batch_norm_shape));
  OpDef pool = make_op(kMaxPool2d,
                       {x,
                        integer("kh"),
                        integer("kw"),
                        integer("sh"),
                        integer("sw"),
                        integer("ph"),
                        integer("pw"),
                        integer("dh"),
                        integer("dw"),
                        {"ceil_mode", ArgKind::boolean}},
                       max_pool2d_shape);
  pool.kernel_scalars = max_pool2d_scalars;
  r.add(std::move(pool));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::int64_t stride_h,
              std::int64_t stride_w, std::int64_t pad_h, std::int64_t pad_w, std::int64_t dil_h,
              std::int64_t dil_w, std::int64_t groups, std::int64_t activation) {
  return call(op_def<detail::kConv2d>(), {&x, &w, &b},
              {SymInt(stride_h), SymInt(stride_w), SymInt(pad_h), SymInt(pad_w), SymInt(dil_h),
               SymInt(dil_w), SymInt(groups), SymInt(activation)});
}

Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return call(op_def<detail::kBatchNorm>(), {&x, &mean, &var, &weight, &bias}, {eps});
}

Tensor max_pool2d(const Tensor& x, std::int64_t kh, std::int64_t kw, std::int64_t sh,
                  std::int64_t sw, std::int64_t ph, std::int64_t pw, std::int64_t dh,
                  std::int64_t dw, bool ceil_mode) {
  return call(op_def<detail::kMaxPool2d>(), {&x},
              {SymInt(kh), SymInt(kw), SymInt(sh), SymInt(sw), SymInt(ph), SymInt(pw), SymInt(dh),
               SymInt(dw), ceil_mode});
}

}  // namespace ops
}  // namespace sinkgraph
