// Linear algebra, normalisation and transformer operators.
#include <cmath>

#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kMatmul[] = "matmul";
inline constexpr char kLinear[] = "linear";
inline constexpr char kSoftmax[] = "softmax";
inline constexpr char kRmsNorm[] = "rms_norm";
inline constexpr char kLayerNorm[] = "layer_norm";
inline constexpr char kRope[] = "rope";
inline constexpr char kEmbedding[] = "embedding";
inline constexpr char kAttention[] = "attention";
inline constexpr char kRopeRows[] = "rope_rows";
inline constexpr char kAttentionRows[] = "attention_rows";
inline constexpr char kSdpa[] = "sdpa";
inline constexpr char kSdpaMask[] = "sdpa_mask";
inline constexpr char kSdpaCausal[] = "sdpa_causal";
inline constexpr char kArgmax[] = "argmax";
inline constexpr char kSample[] = "sample";
inline constexpr char kCountNonfinite[] = "count_nonfinite";
inline constexpr char kLinearQ[] = "linear_q";
inline constexpr char kEmbeddingQ[] = "embedding_q";

namespace {

TensorMeta matmul_shape(const ShapeArgs& args) {
  const TensorMeta& a = args.tensors[0];
  const TensorMeta& b = args.tensors[1];
  check_floating(a, kMatmul, "a");
  check_same_dtype(a, b, kMatmul, "a", "b");
  const int na = a.shape.size();
  const int nb = b.shape.size();
  SG_CHECK(na >= 2 && nb >= 2,
           "matmul: expected a[..., M, K] and b[..., K, N] with at least 2 dims, got a",
           shape_str(a.shape), " and b", shape_str(b.shape));
  SG_CHECK(a.shape[na - 1] == b.shape[nb - 2], "matmul: inner dimensions differ: a",
           shape_str(a.shape), " has K=", a.shape[na - 1].str(), " but b", shape_str(b.shape),
           " has K=", b.shape[nb - 2].str());
  SG_CHECK(nb == 2 || nb == na, "matmul: b", shape_str(b.shape), " must be 2-D or have a's rank ",
           na, " (a", shape_str(a.shape), ")");
  if (nb == na) {
    for (int i = 0; i < na - 2; ++i) {
      SG_CHECK(b.shape[i] == a.shape[i] || b.shape[i] == SymInt(1), "matmul: batch dimension ", i,
               " of b", shape_str(b.shape), " is ", b.shape[i].str(), "; expected ",
               a.shape[i].str(), " (a", shape_str(a.shape), ") or 1");
    }
  }
  SymShape out = a.shape;
  out[na - 1] = b.shape[nb - 1];
  return {a.dtype, out, a.device};
}

TensorMeta linear_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  const TensorMeta& w = args.tensors[1];
  check_floating(x, kLinear, "x");
  check_same_dtype(x, w, kLinear, "x", "w");
  SG_CHECK(x.shape.size() >= 2, "linear: x", shape_str(x.shape),
           " must have at least 2 dims [..., K]");
  check_rank(w, 2, kLinear, "w");
  SG_CHECK(x.shape.back() == w.shape[1], "linear: x", shape_str(x.shape),
           " has K=", x.shape.back().str(), " but w", shape_str(w.shape),
           " is [N, K] with K=", w.shape[1].str());
  SymShape out = x.shape;
  out.back() = w.shape[0];
  return {x.dtype, out, x.device};
}

// A quantized weight (Note [Quantized weights]): u8 [rows, K / 32 * B] in
// `format` (an integer argument); returns K.
SymInt quantized_width(const TensorMeta& w, std::int64_t format, const char* op, const char* arg) {
  SG_CHECK(format == 0 || format == 1, op, ": format must be 0 (q8_0) or 1 (q4_0), got ", format);
  const auto f = static_cast<ops::QuantFormat>(format);
  SG_CHECK(w.dtype == DType::u8, op, ": ", arg, " has dtype ", dtype_name(w.dtype),
           "; expected u8 blocks of ", ops::quant_format_name(f));
  check_rank(w, 2, op, arg);
  const auto bytes = w.shape[1].maybe_value();
  SG_CHECK(bytes.has_value(), op, ": ", arg, shape_str(w.shape),
           " must have a static row width (whole blocks)");
  const std::int64_t b = ops::quant_block_bytes(f);
  SG_CHECK(*bytes > 0 && *bytes % b == 0, op, ": ", arg, shape_str(w.shape), " rows of ", *bytes,
           " bytes are not whole ", ops::quant_format_name(f), " blocks of ", b, " bytes");
  return SymInt(*bytes / b * ops::kQuantBlockValues);
}

TensorMeta linear_q_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  const TensorMeta& w = args.tensors[1];
  SG_CHECK(x.dtype == DType::f32, "linear_q: x has dtype ", dtype_name(x.dtype), "; expected f32");
  const SymInt k = quantized_width(w, args.integer(0), kLinearQ, "w");
  SG_CHECK(x.shape.size() >= 2, "linear_q: x", shape_str(x.shape),
           " must have at least 2 dims [..., K]");
  SG_CHECK(x.shape.back() == k, "linear_q: x", shape_str(x.shape), " has K=", x.shape.back().str(),
           " but w", shape_str(w.shape), " holds rows of K=", k.str(), " values");
  SymShape out = x.shape;
  out.back() = w.shape[0];
  return {x.dtype, out, x.device};
}

TensorMeta embedding_q_shape(const ShapeArgs& args) {
  const TensorMeta& w = args.tensors[0];
  const TensorMeta& ids = args.tensors[1];
  const SymInt d = quantized_width(w, args.integer(0), kEmbeddingQ, "weight");
  SG_CHECK(is_integral(ids.dtype), "embedding_q: ids has dtype ", dtype_name(ids.dtype), " (shape ",
           shape_str(ids.shape), "); expected i32 or i64");
  SymShape out = ids.shape;
  out.push_back(d);
  return {DType::f32, out, w.device};
}

TensorMeta softmax_shape(const ShapeArgs& args) {
  check_floating(args.tensors[0], kSoftmax, "x");
  return args.tensors[0];
}

TensorMeta rms_norm_shape(const ShapeArgs& args) {
  check_floating(args.tensors[0], kRmsNorm, "x");
  check_norm_weight(args.tensors[0], args.tensors[1], kRmsNorm, "weight");
  SG_CHECK(args.real(0) >= 0.0, "rms_norm: eps must be >= 0, got ", args.real(0));
  return args.tensors[0];
}

TensorMeta layer_norm_shape(const ShapeArgs& args) {
  check_floating(args.tensors[0], kLayerNorm, "x");
  check_norm_weight(args.tensors[0], args.tensors[1], kLayerNorm, "weight");
  check_norm_weight(args.tensors[0], args.tensors[2], kLayerNorm, "bias");
  SG_CHECK(args.real(0) >= 0.0, "layer_norm: eps must be >= 0, got ", args.real(0));
  return args.tensors[0];
}

TensorMeta rope_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kRope, "x");
  check_rank(x, 3, kRope, "x");
  const auto d = x.shape[2].maybe_value();
  SG_CHECK(!d || *d % 2 == 0, "rope: head size ", x.shape[2].str(), " of x", shape_str(x.shape),
           " must be even");
  SG_CHECK(args.real(1) > 0.0, "rope: theta must be > 0, got ", args.real(1));
  const std::int64_t style = args.integer(2);
  SG_CHECK(style == 0 || style == 1, "rope: style must be 0 (interleaved) or 1 (half), got ",
           style);
  return x;
}

// pos[B] of a batched operator: i64, one per row of `rows` (dimension 0).
void check_row_positions(const TensorMeta& pos, const TensorMeta& rows, const char* op,
                         const char* rows_name) {
  SG_CHECK(pos.dtype == DType::i64 && pos.shape.size() == 1, op, ": pos", shape_str(pos.shape),
           " has dtype ", dtype_name(pos.dtype), "; expected i64 [B], one position per row");
  SG_CHECK(pos.shape[0] == rows.shape[0], op, ": pos", shape_str(pos.shape), " must hold one ",
           "position per row of ", rows_name, shape_str(rows.shape));
}

TensorMeta rope_rows_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kRopeRows, "x");
  check_rank(x, 3, kRopeRows, "x");
  check_row_positions(args.tensors[1], x, kRopeRows, "x");
  const auto d = x.shape[2].maybe_value();
  SG_CHECK(!d || *d % 2 == 0, "rope_rows: head size ", x.shape[2].str(), " of x",
           shape_str(x.shape), " must be even");
  SG_CHECK(args.real(0) > 0.0, "rope_rows: theta must be > 0, got ", args.real(0));
  const std::int64_t style = args.integer(1);
  SG_CHECK(style == 0 || style == 1, "rope_rows: style must be 0 (interleaved) or 1 (half), got ",
           style);
  return x;
}

TensorMeta attention_rows_shape(const ShapeArgs& args) {
  const TensorMeta& q = args.tensors[0];
  const TensorMeta& k = args.tensors[1];
  const TensorMeta& v = args.tensors[2];
  SG_CHECK(q.dtype == DType::f32 && k.dtype == DType::f32 && v.dtype == DType::f32,
           "attention_rows: q, k and v must be f32, got ", dtype_name(q.dtype), ", ",
           dtype_name(k.dtype), " and ", dtype_name(v.dtype));
  check_rank(q, 3, kAttentionRows, "q");
  check_rank(k, 4, kAttentionRows, "k");
  check_rank(v, 4, kAttentionRows, "v");
  SG_CHECK(k.shape == v.shape, "attention_rows: k", shape_str(k.shape), " and v",
           shape_str(v.shape), " must have the same shape [B, S, Hkv, D]");
  SG_CHECK(q.shape[0] == k.shape[0] && q.shape[2] == k.shape[3], "attention_rows: q",
           shape_str(q.shape), " and k", shape_str(k.shape),
           " must agree on the rows and the head size ([B, Hq, D] and [B, S, Hkv, D])");
  const auto hq = q.shape[1].maybe_value();
  const auto hkv = k.shape[2].maybe_value();
  SG_CHECK(!hq || !hkv || (*hkv > 0 && *hq % *hkv == 0), "attention_rows: q has ", q.shape[1].str(),
           " heads, not a multiple of k's ", k.shape[2].str(), " kv heads");
  check_row_positions(args.tensors[3], q, kAttentionRows, "q");
  return q;
}

TensorMeta embedding_shape(const ShapeArgs& args) {
  const TensorMeta& w = args.tensors[0];
  const TensorMeta& ids = args.tensors[1];
  check_floating(w, kEmbedding, "weight");
  check_rank(w, 2, kEmbedding, "weight");
  SG_CHECK(is_integral(ids.dtype), "embedding: ids has dtype ", dtype_name(ids.dtype), " (shape ",
           shape_str(ids.shape), "); expected i32 or i64");
  SymShape out = ids.shape;
  out.push_back(w.shape[1]);
  return {w.dtype, out, w.device};
}

// The checks the attention operators make: floating q, k and v of one
// dtype, each of `rank` dims, k and v of one shape (`layout` names it in the
// message).
void check_qkv(const ShapeArgs& args, const char* op, const char* layout, int rank = 3) {
  const TensorMeta& q = args.tensors[0];
  const TensorMeta& k = args.tensors[1];
  const TensorMeta& v = args.tensors[2];
  check_floating(q, op, "q");
  check_same_dtype(q, k, op, "q", "k");
  check_same_dtype(q, v, op, "q", "v");
  check_rank(q, rank, op, "q");
  check_rank(k, rank, op, "k");
  check_rank(v, rank, op, "v");
  SG_CHECK(k.shape == v.shape, op, ": k", shape_str(k.shape), " and v", shape_str(v.shape),
           " must have the same shape ", layout);
}

TensorMeta attention_shape(const ShapeArgs& args) {
  const TensorMeta& q = args.tensors[0];
  const TensorMeta& k = args.tensors[1];
  check_qkv(args, kAttention, "[S, Hkv, D]");
  SG_CHECK(q.shape[2] == k.shape[2], "attention: head size of q", shape_str(q.shape), " is ",
           q.shape[2].str(), " but k", shape_str(k.shape), " has ", k.shape[2].str());
  const auto hq = q.shape[1].maybe_value();
  const auto hkv = k.shape[1].maybe_value();
  SG_CHECK(!hq || !hkv || (*hkv > 0 && *hq % *hkv == 0), "attention: q has ", q.shape[1].str(),
           " heads, not a multiple of k's ", k.shape[1].str(), " kv heads");
  const auto seq = args.sym(0).maybe_value();
  SG_CHECK(!seq || *seq >= 0, "attention: seq_len must be >= 0, got ", *seq);
  return q;
}

// The heads-first form: q[B, H, L, D], k and v [B, Hkv, S, D] (torch's
// scaled_dot_product_attention layout, any strides), Hkv dividing H; the
// result is [B, L, H * D], as the embedding form's.
TensorMeta sdpa_heads_first_shape(const ShapeArgs& args) {
  const TensorMeta& q = args.tensors[0];
  const TensorMeta& k = args.tensors[1];
  check_qkv(args, kSdpa, "[B, Hkv, S, D]", 4);
  SG_CHECK(q.shape[0] == k.shape[0] && q.shape[3] == k.shape[3], "sdpa: q", shape_str(q.shape),
           " and k", shape_str(k.shape), " must agree on the batch and the head size [B, *, *, D]");
  const std::int64_t heads = args.integer(0);
  const auto h = q.shape[1].maybe_value();
  const auto hkv = k.shape[1].maybe_value();
  SG_CHECK(heads > 0 && (!h || *h == heads), "sdpa: ", heads, " heads but q", shape_str(q.shape),
           " has ", q.shape[1].str());
  SG_CHECK(!hkv || (*hkv > 0 && heads % *hkv == 0), "sdpa: q has ", heads,
           " heads, not a multiple of k's ", k.shape[1].str(), " kv heads");
  SG_CHECK(!(k.shape[2] == SymInt(0)), "sdpa: no keys (k", shape_str(k.shape), ")");
  return {q.dtype, SymShape{q.shape[0], q.shape[2], q.shape[1] * q.shape[3]}, q.device};
}

TensorMeta sdpa_shape(const ShapeArgs& args) {
  const TensorMeta& q = args.tensors[0];
  const TensorMeta& k = args.tensors[1];
  if (q.shape.size() == 4) return sdpa_heads_first_shape(args);
  check_qkv(args, kSdpa, "[B, S, E]");
  SG_CHECK(q.shape[0] == k.shape[0] && q.shape[2] == k.shape[2], "sdpa: q", shape_str(q.shape),
           " and k", shape_str(k.shape), " must agree on the batch and the embedding [B, *, E]");
  const std::int64_t heads = args.integer(0);
  const auto e = q.shape[2].maybe_value();
  SG_CHECK(heads > 0 && (!e || *e % heads == 0), "sdpa: ", heads,
           " heads do not divide the embedding of q", shape_str(q.shape));
  SG_CHECK(!(k.shape[1] == SymInt(0)), "sdpa: no keys (k", shape_str(k.shape), ")");
  return q;
}

// sdpa with an additive mask[B|1, H|1, L|1, S] of q's dtype (a broadcast
// dim may be a stride-0 view).
TensorMeta sdpa_mask_shape(const ShapeArgs& args) {
  TensorMeta q = sdpa_shape(args);
  const TensorMeta& k = args.tensors[1];
  const TensorMeta& mask = args.tensors[3];
  check_same_dtype(q, mask, kSdpaMask, "q", "mask");
  check_rank(mask, 4, kSdpaMask, "mask");
  const SymInt heads(args.integer(0));
  // Queries and keys: dims 1 of q [B, L, E] and k [B, S, E], or 2 of the
  // heads-first q [B, H, L, D] and k [B, Hkv, S, D].
  const int rows = args.tensors[0].shape.size() == 4 ? 2 : 1;
  const SymInt want[4] = {q.shape[0], heads, args.tensors[0].shape[rows], k.shape[rows]};
  for (int i = 0; i < 3; ++i) {
    SG_CHECK(mask.shape[i] == SymInt(1) || mask.shape[i] == want[i], "sdpa_mask: mask",
             shape_str(mask.shape), " does not broadcast to [batch, heads, queries, keys] = [",
             want[0].str(), ",", want[1].str(), ",", want[2].str(), ",", want[3].str(), "]");
  }
  SG_CHECK(mask.shape[3] == want[3], "sdpa_mask: mask", shape_str(mask.shape), " has ",
           mask.shape[3].str(), " keys but k", shape_str(k.shape), " has ", want[3].str());
  return q;
}

TensorMeta argmax_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  SG_CHECK(x.dtype != DType::boolean && x.dtype != DType::u8, "argmax: ", dtype_name(x.dtype),
           " input is not supported");
  SG_CHECK(!x.shape.empty(), "argmax: x must have at least 1 dimension");
  SG_CHECK(!(x.shape.back() == SymInt(0)), "argmax: the last dimension of x", shape_str(x.shape),
           " is empty");
  SymShape out = x.shape;
  out.erase(out.size() - 1);
  return {DType::i64, out, x.device};
}

TensorMeta sample_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kSample, "logits");
  SG_CHECK(!x.shape.empty(), "sample: logits must have at least 1 dimension");
  SG_CHECK(!(x.shape.back() == SymInt(0)), "sample: the last dimension of logits",
           shape_str(x.shape), " is empty");
  const double t = args.real(0);
  SG_CHECK(t > 0.0 && std::isfinite(t), "sample: temperature must be finite and > 0, got ", t,
           " (greedy decoding is argmax)");
  SymShape out = x.shape;
  out.erase(out.size() - 1);
  return {DType::i64, out, x.device};
}

TensorMeta count_nonfinite_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  check_floating(x, kCountNonfinite, "x");
  SG_CHECK(!x.shape.empty(), "count_nonfinite: x must have at least 1 dimension");
  SymShape out = x.shape;
  out.erase(out.size() - 1);
  return {DType::i64, out, x.device};
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  const ArgSpec x{"x"};
  const ArgSpec eps{"eps", ArgKind::real};
  r.add(make_op(kMatmul, {{"a"}, {"b"}}, matmul_shape));
  r.add(make_op(kLinear, {x, {"w"}}, linear_shape));
  r.add(make_op(kLinearQ, {x, {"w"}, {"format", ArgKind::integer}}, linear_q_shape));
  r.add(
      make_op(kEmbeddingQ, {{"weight"}, {"ids"}, {"format", ArgKind::integer}}, embedding_q_shape));
  r.add(make_op(kSoftmax, {x}, softmax_shape));
  r.add(make_op(kRmsNorm, {x, {"weight"}, eps}, rms_norm_shape));
  r.add(make_op(kLayerNorm, {x, {"weight"}, {"bias"}, eps}, layer_norm_shape));
  r.add(make_op(kRope,
                {x,
                 {"pos0", ArgKind::integer, /*updatable=*/true},
                 {"theta", ArgKind::real},
                 {"style", ArgKind::integer}},
                rope_shape));
  r.add(make_op(kRopeRows, {x, {"pos"}, {"theta", ArgKind::real}, {"style", ArgKind::integer}},
                rope_rows_shape));
  r.add(make_op(kEmbedding, {{"weight"}, {"ids"}}, embedding_shape));
  r.add(make_op(kAttention,
                {{"q"},
                 {"k"},
                 {"v"},
                 {"seq_len", ArgKind::integer, /*updatable=*/true},
                 {"scale", ArgKind::real}},
                attention_shape));
  r.add(make_op(kAttentionRows, {{"q"}, {"k"}, {"v"}, {"pos"}, {"scale", ArgKind::real}},
                attention_rows_shape));
  r.add(make_op(kSdpa, {{"q"}, {"k"}, {"v"}, {"heads", ArgKind::integer}, {"scale", ArgKind::real}},
                sdpa_shape));
  r.add(make_op(
      kSdpaMask,
      {{"q"}, {"k"}, {"v"}, {"mask"}, {"heads", ArgKind::integer}, {"scale", ArgKind::real}},
      sdpa_mask_shape));
  r.add(make_op(kSdpaCausal,
                {{"q"}, {"k"}, {"v"}, {"heads", ArgKind::integer}, {"scale", ArgKind::real}},
                sdpa_shape));
  r.add(make_op(kArgmax, {x}, argmax_shape));
  r.add(make_op(kSample,
                {{"logits"},
                 {"temperature", ArgKind::real},
                 {"seed", ArgKind::integer},
                 {"offset", ArgKind::integer, /*updatable=*/true}},
                sample_shape));
  r.add(make_op(kCountNonfinite, {x}, count_nonfinite_shape));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor matmul(const Tensor& a, const Tensor& b) {
  return call(op_def<detail::kMatmul>(), {&a, &b});
}
Tensor linear(const Tensor& x, const Tensor& w) {
  return call(op_def<detail::kLinear>(), {&x, &w});
}
std::int64_t quant_block_bytes(QuantFormat format) {
  return format == QuantFormat::q8_0 ? 2 + kQuantBlockValues : 2 + kQuantBlockValues / 2;
}
const char* quant_format_name(QuantFormat format) {
  return format == QuantFormat::q8_0 ? "q8_0" : "q4_0";
}
Tensor linear_q(const Tensor& x, const Tensor& w, QuantFormat format) {
  return call(op_def<detail::kLinearQ>(), {&x, &w}, {SymInt(static_cast<std::int64_t>(format))});
}
Tensor embedding_q(const Tensor& w, const Tensor& ids, QuantFormat format) {
  return call(op_def<detail::kEmbeddingQ>(), {&w, &ids},
              {SymInt(static_cast<std::int64_t>(format))});
}
Tensor softmax(const Tensor& x) { return call(op_def<detail::kSoftmax>(), {&x}); }
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return call(op_def<detail::kRmsNorm>(), {&x, &weight}, {eps});
}
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return call(op_def<detail::kLayerNorm>(), {&x, &weight, &bias}, {eps});
}
Tensor rope(const Tensor& x, const SymInt& pos0, double theta, RopeStyle style) {
  return call(op_def<detail::kRope>(), {&x},
              {pos0, theta, SymInt(static_cast<std::int64_t>(style))});
}
Tensor rope_rows(const Tensor& x, const Tensor& pos, double theta, RopeStyle style) {
  return call(op_def<detail::kRopeRows>(), {&x, &pos},
              {theta, SymInt(static_cast<std::int64_t>(style))});
}
Tensor embedding(const Tensor& weight, const Tensor& ids) {
  return call(op_def<detail::kEmbedding>(), {&weight, &ids});
}
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const SymInt& seq_len,
                 double scale) {
  if (scale <= 0.0 && q.ndim() == 3) scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  return call(op_def<detail::kAttention>(), {&q, &k, &v}, {seq_len, scale});
}
Tensor attention_rows(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                      double scale) {
  if (scale <= 0.0 && q.ndim() == 3) scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  return call(op_def<detail::kAttentionRows>(), {&q, &k, &v, &pos}, {scale});
}
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads, double scale) {
  return call(op_def<detail::kSdpa>(), {&q, &k, &v}, {SymInt(heads), scale});
}
Tensor sdpa_mask(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 std::int64_t heads, double scale) {
  return call(op_def<detail::kSdpaMask>(), {&q, &k, &v, &mask}, {SymInt(heads), scale});
}
Tensor sdpa_causal(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads,
                   double scale) {
  return call(op_def<detail::kSdpaCausal>(), {&q, &k, &v}, {SymInt(heads), scale});
}
Tensor argmax(const Tensor& x) { return call(op_def<detail::kArgmax>(), {&x}); }
Tensor sample(const Tensor& logits, double temperature, std::int64_t seed, const SymInt& offset) {
  return call(op_def<detail::kSample>(), {&logits}, {temperature, SymInt(seed), offset});
}
Tensor count_nonfinite(const Tensor& x) { return call(op_def<detail::kCountNonfinite>(), {&x}); }

}  // namespace ops
}  // namespace sinkgraph
