// The Llama decoder, written once against Tensor, SymInt and ops::.
#include "sinkgraph/llama.h"

#include <cmath>
#include <random>
#include <sstream>

#include "models/checkpoint_common.h"
#include "sinkgraph/error.h"

namespace sinkgraph::models {

std::int64_t LlamaConfig::num_parameters() const {
  const std::int64_t per_layer = 2 * dim + 2 * dim * dim + 2 * kv_dim() * dim +
                                 3 * hidden_dim * dim + (attention_bias ? dim + 2 * kv_dim() : 0);
  return vocab_size * dim * (shared_classifier ? 1 : 2) + n_layers * per_layer + dim;
}

void LlamaConfig::validate(const std::string& source) const {
  const auto in_range = [&](const char* name, std::int64_t v, std::int64_t hi) {
    SG_CHECK(v >= 1 && v <= hi, source, ": ", name, " is ", v, "; expected 1 <= ", name,
             " <= ", hi);
  };
  in_range("dim", dim, 1 << 16);
  in_range("hidden_dim", hidden_dim, 1 << 20);
  in_range("n_layers", n_layers, 1024);
  in_range("n_heads", n_heads, 1024);
  in_range("n_kv_heads", n_kv_heads, 1024);
  in_range("vocab_size", vocab_size, 1 << 24);
  in_range("max_seq_len", max_seq_len, 1 << 20);
  SG_CHECK(dim % n_heads == 0, source, ": dim ", dim, " is not a multiple of n_heads ", n_heads);
  SG_CHECK(n_heads % n_kv_heads == 0, source, ": n_heads ", n_heads,
           " is not a multiple of n_kv_heads ", n_kv_heads);
  SG_CHECK(head_size() % 2 == 0, source, ": head size dim/n_heads = ", head_size(),
           " must be even for rotary embeddings");
  SG_CHECK(std::isfinite(norm_eps) && norm_eps >= 0 && norm_eps < 1, source, ": norm_eps ",
           norm_eps, " must be in [0, 1)");
  SG_CHECK(std::isfinite(rope_theta) && rope_theta > 0, source, ": rope_theta ", rope_theta,
           " must be > 0");
  // The kernels compute in f32: each value is checked in the type it is used
  // in. A theta that rounds to 0 (or to a subnormal, whose inverse powers
  // overflow) would make every rotation angle inf or NaN, and so every logit
  // NaN; an eps that rounds to 0 is no longer the eps the config asked for.
  SG_CHECK(std::isnormal(static_cast<float>(rope_theta)), source, ": rope_theta ", rope_theta,
           " is out of f32's normal range (the kernels compute in f32, where it is ",
           static_cast<float>(rope_theta), ")");
  SG_CHECK(norm_eps == 0 || static_cast<float>(norm_eps) != 0.0F, source, ": norm_eps ", norm_eps,
           " rounds to 0 in f32 (the kernels compute in f32)");
}

std::string LlamaConfig::str() const {
  std::ostringstream out;
  out << "dim " << dim << ", hidden " << hidden_dim << ", layers " << n_layers << ", heads "
      << n_heads << ", kv heads " << n_kv_heads << ", vocab " << vocab_size << ", seq_len "
      << max_seq_len << ", rope "
      << (rope_style == ops::RopeStyle::interleaved ? "interleaved" : "half")
      << (shared_classifier ? ", shared classifier" : ", separate classifier")
      << (attention_bias ? ", attention biases" : "");
  return out.str();
}

std::string LlamaModel::trace_key() const {
  // Bump the leading tag when forward() changes what it records. Which
  // weights are quantized, and how, changes the operators recorded: each
  // quantized matrix is named with its row width in bytes (which, with the
  // config, says its format).
  std::ostringstream quantized;
  for (const auto& [name, t] : named_parameters()) {
    if (t->dtype() == DType::u8) quantized << " " << name << " u8[" << t->shape()[1] << "]";
  }
  std::ostringstream out;
  out << "sinkgraph.llama.forward/3: " << config_.str() << ", quantized:" << quantized.str()
      << ", norm_eps " << std::hexfloat << config_.norm_eps << ", rope_theta " << config_.rope_theta
      << ", weights " << dtype_name(weights_.tok_embeddings.dtype()) << std::dec
      << ", tensor parallel " << tp_.rank << "/" << tp_.size << " group " << tp_.group
      << " classifier " << (tp_.classifier == ClassifierSplit::vocab ? "vocab" : "replicated");
  return out.str();
}

namespace {

void check_shape(const Tensor& t, const Shape& want, const std::string& name) {
  SG_CHECK(t.defined(), "model: tensor ", name, " is missing");
  if (t.dtype() == DType::u8 && want.size() == 2) {  // Note [Quantized weights] in ops.h
    SG_CHECK(t.shape().size() == 2 && t.shape()[0] == want[0] && t.is_contiguous(),
             "model: quantized tensor ", name, " has shape ", shape_str(t.shape()),
             "; expected a contiguous ", want[0], " rows of blocks");
    (void)quantized_format(t, want[1], name);
    return;
  }
  SG_CHECK(t.shape() == want, "model: tensor ", name, " has shape ", shape_str(t.shape()),
           "; expected ", shape_str(want));
  SG_CHECK(t.dtype() == DType::f32, "model: tensor ", name, " has dtype ", dtype_name(t.dtype()),
           "; expected f32", want.size() == 2 ? " (or u8 blocks of q8_0 or q4_0)" : "");
}

// The per-rank sizes of a tensor-parallel split (everything whole at size 1).
struct Split {
  std::int64_t heads, kv_heads, hidden, vocab;
};

Split split_of(const LlamaConfig& c, const TensorParallel& tp) {
  SG_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "model: tensor-parallel rank ",
           tp.rank, " of ", tp.size, " is not a rank in [0, size)");
  SG_CHECK(tp.group >= 0, "model: tensor-parallel group ", tp.group, " is negative");
  SG_CHECK(c.n_heads % tp.size == 0 && c.n_kv_heads % tp.size == 0 && c.hidden_dim % tp.size == 0,
           "model: tensor parallelism over ", tp.size, " processes needs it to divide n_heads (",
           c.n_heads, "), n_kv_heads (", c.n_kv_heads, ") and hidden_dim (", c.hidden_dim,
           "): each rank holds whole heads");
  const bool by_vocab = tp.size > 1 && tp.classifier == ClassifierSplit::vocab;
  SG_CHECK(!by_vocab || c.vocab_size % tp.size == 0,
           "model: a classifier split by vocabulary over ", tp.size,
           " processes needs it to divide vocab_size (", c.vocab_size,
           "); replicate the classifier instead (ClassifierSplit::replicated, generate "
           "--tp-classifier replicated)");
  return {c.n_heads / tp.size, c.n_kv_heads / tp.size, c.hidden_dim / tp.size,
          by_vocab ? c.vocab_size / tp.size : c.vocab_size};
}

// x @ w^T, with w f32 or quantized (its format from its width and x's K).
Tensor linear(const Tensor& x, const Tensor& w) {
  if (w.dtype() != DType::u8) return ops::linear(x, w);
  const std::int64_t k = x.sym_size(x.ndim() - 1).value();
  return ops::linear_q(x, w, quantized_format(w, k, "linear"));
}

// x @ w^T, plus the bias where the model has one (attention_bias).
Tensor project(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Tensor y = linear(x, w);
  return bias.defined() ? ops::add(y, bias) : y;
}

// Rows `tokens` of the embedding, f32 or quantized.
Tensor embed(const Tensor& table, const Tensor& tokens, std::int64_t dim) {
  if (table.dtype() != DType::u8) return ops::embedding(table, tokens);
  return ops::embedding_q(table, tokens, quantized_format(table, dim, "tok_embeddings.weight"));
}

}  // namespace

LlamaModel::LlamaModel(LlamaConfig config, LlamaWeights weights, TensorParallel tp)
    : config_(config), weights_(std::move(weights)), tp_(tp) {
  config_.validate("model");
  const LlamaConfig& c = config_;
  const Split s = split_of(c, tp_);
  const std::int64_t d = c.head_size();
  check_shape(weights_.tok_embeddings, {c.vocab_size, c.dim}, "tok_embeddings.weight");
  SG_CHECK(static_cast<std::int64_t>(weights_.layers.size()) == c.n_layers,
           "model: ", weights_.layers.size(), " layers of weights for n_layers ", c.n_layers);
  for (std::size_t i = 0; i < weights_.layers.size(); ++i) {
    const LlamaLayer& l = weights_.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    check_shape(l.attention_norm, {c.dim}, p + "attention_norm.weight");
    check_shape(l.wq, {s.heads * d, c.dim}, p + "attention.wq.weight");
    check_shape(l.wk, {s.kv_heads * d, c.dim}, p + "attention.wk.weight");
    check_shape(l.wv, {s.kv_heads * d, c.dim}, p + "attention.wv.weight");
    check_shape(l.wo, {c.dim, s.heads * d}, p + "attention.wo.weight");
    if (c.attention_bias) {
      check_shape(l.bq, {s.heads * d}, p + "attention.wq.bias");
      check_shape(l.bk, {s.kv_heads * d}, p + "attention.wk.bias");
      check_shape(l.bv, {s.kv_heads * d}, p + "attention.wv.bias");
    } else {
      SG_CHECK(!l.bq.defined() && !l.bk.defined() && !l.bv.defined(), "model: layer ", i,
               " has attention biases but the config has none (attention_bias false)");
    }
    check_shape(l.ffn_norm, {c.dim}, p + "ffn_norm.weight");
    check_shape(l.w1, {s.hidden, c.dim}, p + "feed_forward.w1.weight");
    check_shape(l.w2, {c.dim, s.hidden}, p + "feed_forward.w2.weight");
    check_shape(l.w3, {s.hidden, c.dim}, p + "feed_forward.w3.weight");
  }
  check_shape(weights_.norm, {c.dim}, "norm.weight");
  if (!weights_.output.defined()) weights_.output = weights_.tok_embeddings;
  if (s.vocab != c.vocab_size && weights_.output.shares_storage(weights_.tok_embeddings) &&
      weights_.output.shape() == weights_.tok_embeddings.shape()) {
    // A shared classifier split by vocabulary: this rank's rows of the
    // embedding, a view, so the weights are held once.
    weights_.output = ops::narrow(weights_.tok_embeddings, 0, tp_.rank * s.vocab, s.vocab);
  }
  check_shape(weights_.output, {s.vocab, c.dim}, "output.weight");
  config_.shared_classifier = weights_.output.shares_storage(weights_.tok_embeddings);
}

namespace {

// Note [Tensor-parallel Llama]
// Megatron's split of a layer over `size` processes, each holding whole
// heads: q, k and v are split by output rows (rank r computes heads
// [r * H/size, (r + 1) * H/size) and keeps their K/V in its own cache), so
// attention needs no communication; wo is split by input columns, so each
// rank's product over its heads is a partial sum of the whole output, and
// one all_reduce adds the partials. The feed-forward does the same: w1 and
// w3 by output rows (a slice of the hidden units), w2 by input columns, one
// all_reduce. Two collectives per layer, each of [tokens, dim] floats.
// The classifier is split by vocabulary by default (ClassifierSplit::vocab):
// rank r computes logits [r * V/size, (r + 1) * V/size) for every row, one
// all_gather collects them (rank-major) and a transpose puts each row's
// logits back in vocabulary order; a shared classifier's slice is a view of
// the embedding. It is the largest single weight of a small model and every
// token reads it whole, so splitting it cuts the bytes a rank reads per
// token far more than the layers alone do (docs/performance.md, "Tensor
// parallelism"); ClassifierSplit::replicated keeps it whole on every rank,
// with no collective. The embedding (one row read per token) and the norms
// are replicated, and every rank ends with the same logits. A rank's
// partial products sum in another order than the whole model's, so logits
// agree within rounding, not bitwise.

// The sum over the tensor-parallel group of each rank's partial `x` (x
// itself without tensor parallelism).
Tensor reduce_partial(const Tensor& x, const TensorParallel& tp) {
  return tp.size > 1 ? ops::all_reduce(x, tp.group) : x;
}

// The logits [rows, vocab] from the final hidden state: with the classifier
// split by vocabulary, each rank's [rows, vocab/size] are gathered (rank
// order, dim 0) and interleaved back into whole rows.
Tensor classify(const Tensor& x, const Tensor& output, const LlamaConfig& c,
                const TensorParallel& tp) {
  Tensor local = linear(x, output);  // [rows, vocab / size] or [rows, vocab]
  const std::int64_t part = output.shape()[0];
  if (part == c.vocab_size) return local;
  const SymInt rows = x.sym_size(0);
  const Tensor gathered = ops::all_gather(local, tp.group, tp.size);  // [size * rows, vocab/size]
  const Tensor by_rank = ops::view(gathered, {tp.size, rows, part});
  return ops::reshape(ops::transpose(by_rank, 0, 1), {rows, c.vocab_size});
}

// A layer's SwiGLU feed-forward with its residual: x + w2(silu(w1 h) * w3 h),
// h = rms_norm(x).
Tensor feed_forward(const Tensor& x, const LlamaLayer& w, double eps, const TensorParallel& tp) {
  const Tensor h = ops::rms_norm(x, w.ffn_norm, eps);
  const Tensor gate = ops::mul(ops::silu(linear(h, w.w1)), linear(h, w.w3));
  return ops::add(x, reduce_partial(linear(gate, w.w2), tp));
}

}  // namespace

Tensor LlamaModel::forward(const Tensor& tokens, const SymInt& pos0, const Tensor& kv_cache) const {
  const LlamaConfig& c = config_;
  const SymInt p = tokens.sym_size(0);
  const std::int64_t d = c.head_size();
  const Split s = split_of(c, tp_);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Tensor x = embed(weights_.tok_embeddings, tokens, c.dim);  // [P, dim]
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& w = weights_.layers[static_cast<std::size_t>(l)];
    // Attention: q, k, v; rotate q and k; write k and v into the cache at pos0.
    const Tensor h = ops::rms_norm(x, w.attention_norm, c.norm_eps);
    Tensor q = ops::view(project(h, w.wq, w.bq), {p, s.heads, d});
    Tensor k = ops::view(project(h, w.wk, w.bk), {p, s.kv_heads, d});
    const Tensor v = ops::view(project(h, w.wv, w.bv), {p, s.kv_heads, d});
    q = ops::rope(q, pos0, c.rope_theta, c.rope_style);
    k = ops::rope(k, pos0, c.rope_theta, c.rope_style);
    const Tensor layer = ops::narrow(kv_cache, 0, l, 1);  // [1, 2, S, Hkv, D]
    const SymShape cache_shape{kv_cache.sym_size(2), s.kv_heads, d};
    const Tensor k_cache = ops::view(ops::narrow(layer, 1, 0, 1), cache_shape);
    const Tensor v_cache = ops::view(ops::narrow(layer, 1, 1, 1), cache_shape);
    ops::index_copy_(k_cache, pos0, k);
    ops::index_copy_(v_cache, pos0, v);
    const Tensor a = ops::attention(q, k_cache, v_cache, pos0 + p, scale);
    x = ops::add(x, reduce_partial(linear(ops::view(a, {p, s.heads * d}), w.wo), tp_));
    x = feed_forward(x, w, c.norm_eps, tp_);
  }
  x = ops::rms_norm(x, weights_.norm, c.norm_eps);
  return classify(x, weights_.output, c, tp_);  // [P, vocab]
}

// Note [Batched decoding]
// One decode step for B sequences at once (vLLM's decode batch): row b of
// every activation is sequence b, at its own position pos[b], with its own
// KV slot b. Positions are an i64 tensor, a graph input, so one captured
// graph per batch size serves every mix of positions; the batch size is a
// shape, so each bucket is its own graph key. A row's result never depends
// on the others (batch invariance): the products are linear's rows kernel
// (Note [Rows of a linear]), rope_rows and attention_rows compute a row as
// rope and attention do for one sequence, and norms and elementwise work
// row by row, so a sequence's logits are bitwise the same alone or batched.
Tensor LlamaModel::forward_batched(const Tensor& tokens, const Tensor& pos,
                                   const Tensor& kv_cache) const {
  const LlamaConfig& c = config_;
  SG_CHECK(tokens.ndim() == 1 && kv_cache.ndim() == 6, "llama: forward_batched takes tokens [B] ",
           "and a batched KV cache [slots, layers, 2, positions, kv heads, head size]; got tokens",
           shape_str(tokens.sym_shape()), " and a cache", shape_str(kv_cache.sym_shape()));
  const SymInt b = tokens.sym_size(0);
  const std::int64_t d = c.head_size();
  const Split s = split_of(c, tp_);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Tensor slots = ops::narrow(kv_cache, 0, 0, b);       // the first B slots
  Tensor x = embed(weights_.tok_embeddings, tokens, c.dim);  // [B, dim]
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& w = weights_.layers[static_cast<std::size_t>(l)];
    const Tensor h = ops::rms_norm(x, w.attention_norm, c.norm_eps);
    Tensor q = ops::view(project(h, w.wq, w.bq), {b, s.heads, d});
    Tensor k = ops::view(project(h, w.wk, w.bk), {b, s.kv_heads, d});
    const Tensor v = ops::view(project(h, w.wv, w.bv), {b, s.kv_heads, d});
    q = ops::rope_rows(q, pos, c.rope_theta, c.rope_style);
    k = ops::rope_rows(k, pos, c.rope_theta, c.rope_style);
    // [B, 2, S, Hkv, D], then k and v [B, S, Hkv, D]: strided views of the
    // slots (squeeze keeps strides, where view needs contiguous memory).
    const Tensor layer = ops::squeeze(ops::narrow(slots, 1, l, 1), 1);
    const Tensor k_cache = ops::squeeze(ops::narrow(layer, 1, 0, 1), 1);
    const Tensor v_cache = ops::squeeze(ops::narrow(layer, 1, 1, 1), 1);
    ops::index_copy_rows_(k_cache, pos, k);
    ops::index_copy_rows_(v_cache, pos, v);
    const Tensor a = ops::attention_rows(q, k_cache, v_cache, pos, scale);
    x = ops::add(x, reduce_partial(linear(ops::view(a, {b, s.heads * d}), w.wo), tp_));
    x = feed_forward(x, w, c.norm_eps, tp_);
  }
  x = ops::rms_norm(x, weights_.norm, c.norm_eps);
  return classify(x, weights_.output, c, tp_);  // [B, vocab]
}

Tensor LlamaModel::new_batched_kv_cache(std::int64_t slots, std::int64_t positions) const {
  const LlamaConfig& c = config_;
  SG_CHECK(slots >= 1, "new_batched_kv_cache: ", slots, " slots; at least one is needed");
  SG_CHECK(positions >= 1 && positions <= c.max_seq_len, "new_batched_kv_cache: ", positions,
           " positions; the model takes 1 to max_seq_len = ", c.max_seq_len);
  return ops::zeros({slots, c.n_layers, 2, positions, split_of(c, tp_).kv_heads, c.head_size()});
}

TracedFn LlamaModel::as_batched_function() const {
  return [this](std::span<const Arg> args) -> std::vector<Tensor> {
    SG_CHECK(args.size() == 3, "llama: expected (tokens, pos, kv_cache), got ", args.size(),
             " arguments");
    return {forward_batched(std::get<Tensor>(args[0]), std::get<Tensor>(args[1]),
                            std::get<Tensor>(args[2]))};
  };
}

Tensor LlamaModel::new_kv_cache() const { return new_kv_cache(config_.max_seq_len); }

Tensor LlamaModel::new_kv_cache(std::int64_t positions) const {
  const LlamaConfig& c = config_;
  SG_CHECK(positions >= 1 && positions <= c.max_seq_len, "new_kv_cache: ", positions,
           " positions; the model takes 1 to max_seq_len = ", c.max_seq_len);
  return ops::zeros({c.n_layers, 2, positions, split_of(c, tp_).kv_heads, c.head_size()});
}

TracedFn LlamaModel::as_function() const {
  return [this](std::span<const Arg> args) -> std::vector<Tensor> {
    SG_CHECK(args.size() == 3, "llama: expected (tokens, pos, kv_cache), got ", args.size(),
             " arguments");
    const auto* pos = std::get_if<SymInt>(&args[1]);
    const SymInt p = pos != nullptr ? *pos : SymInt(std::get<std::int64_t>(args[1]));
    return {forward(std::get<Tensor>(args[0]), p, std::get<Tensor>(args[2]))};
  };
}

NamedTensors LlamaModel::named_parameters() const {
  NamedTensors out;
  out.emplace_back("tok_embeddings.weight", &weights_.tok_embeddings);
  for (std::size_t i = 0; i < weights_.layers.size(); ++i) {
    const LlamaLayer& l = weights_.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    out.emplace_back(p + "attention_norm.weight", &l.attention_norm);
    out.emplace_back(p + "attention.wq.weight", &l.wq);
    out.emplace_back(p + "attention.wk.weight", &l.wk);
    out.emplace_back(p + "attention.wv.weight", &l.wv);
    out.emplace_back(p + "attention.wo.weight", &l.wo);
    if (l.bq.defined()) {
      out.emplace_back(p + "attention.wq.bias", &l.bq);
      out.emplace_back(p + "attention.wk.bias", &l.bk);
      out.emplace_back(p + "attention.wv.bias", &l.bv);
    }
    out.emplace_back(p + "ffn_norm.weight", &l.ffn_norm);
    out.emplace_back(p + "feed_forward.w1.weight", &l.w1);
    out.emplace_back(p + "feed_forward.w2.weight", &l.w2);
    out.emplace_back(p + "feed_forward.w3.weight", &l.w3);
  }
  out.emplace_back("norm.weight", &weights_.norm);
  out.emplace_back("output.weight", &weights_.output);
  return out;
}

LlamaConfig builtin_config() { return LlamaConfig{}; }

LlamaModel random_model(const LlamaConfig& config, std::uint64_t seed) {
  config.validate("random model");
  // mt19937_64 is specified exactly, and the float is built from its bits, so
  // the same seed gives the same weights on every platform.
  std::mt19937_64 rng(seed);
  const auto uniform = [&](const Shape& shape, float scale) {
    std::vector<float> v(static_cast<std::size_t>(numel(shape)));
    for (auto& x : v) {
      const auto bits = static_cast<float>(rng() >> 40) * (1.0F / 16777216.0F);  // [0, 1)
      x = (2.0F * bits - 1.0F) * scale;
    }
    return Tensor::from_floats(v, shape);
  };
  const auto ones = [](std::int64_t n) { return ops::full({n}, 1.0); };
  const auto fan_in = [](std::int64_t n) { return 1.0F / std::sqrt(static_cast<float>(n)); };
  const LlamaConfig& c = config;
  LlamaWeights w;
  // Small embeddings (as in GPT-style init) let the layers, not the token's own
  // embedding, decide the argmax of the shared classifier: greedy decoding of
  // the random model then moves instead of repeating its input.
  w.tok_embeddings = uniform({c.vocab_size, c.dim}, 0.05F);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    LlamaLayer layer;
    layer.attention_norm = ones(c.dim);
    layer.wq = uniform({c.dim, c.dim}, fan_in(c.dim));
    layer.wk = uniform({c.kv_dim(), c.dim}, fan_in(c.dim));
    layer.wv = uniform({c.kv_dim(), c.dim}, fan_in(c.dim));
    layer.wo = uniform({c.dim, c.dim}, fan_in(c.dim));
    if (c.attention_bias) {
      layer.bq = uniform({c.dim}, fan_in(c.dim));
      layer.bk = uniform({c.kv_dim()}, fan_in(c.dim));
      layer.bv = uniform({c.kv_dim()}, fan_in(c.dim));
    }
    layer.ffn_norm = ones(c.dim);
    layer.w1 = uniform({c.hidden_dim, c.dim}, fan_in(c.dim));
    layer.w2 = uniform({c.dim, c.hidden_dim}, fan_in(c.hidden_dim));
    layer.w3 = uniform({c.hidden_dim, c.dim}, fan_in(c.dim));
    w.layers.push_back(std::move(layer));
  }
  w.norm = ones(c.dim);
  w.output = c.shared_classifier ? w.tok_embeddings : uniform({c.vocab_size, c.dim}, fan_in(c.dim));
  return LlamaModel(config, std::move(w));
}

std::int64_t LlamaModel::weight_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : named_parameters()) {
    if (name == "output.weight" && config_.shared_classifier) continue;  // the embedding
    bytes += t->numel() * static_cast<std::int64_t>(dtype_size(t->dtype()));
  }
  return bytes;
}

namespace detail {

void check_split(const LlamaConfig& c, const TensorParallel& tp) { (void)split_of(c, tp); }

std::optional<ShardSlice> shard_slice(const LlamaConfig& c, const TensorParallel& tp,
                                      Tensor LlamaLayer::*member) {
  const Split s = split_of(c, tp);
  if (tp.size == 1) return std::nullopt;
  const std::int64_t d = c.head_size();
  const auto rank_part = [&](int dim, std::int64_t n) { return ShardSlice{dim, tp.rank * n, n}; };
  if (member == &LlamaLayer::wq || member == &LlamaLayer::bq) return rank_part(0, s.heads * d);
  if (member == &LlamaLayer::wk || member == &LlamaLayer::wv || member == &LlamaLayer::bk ||
      member == &LlamaLayer::bv)
    return rank_part(0, s.kv_heads * d);
  if (member == &LlamaLayer::wo) return rank_part(1, s.heads * d);
  if (member == &LlamaLayer::w1 || member == &LlamaLayer::w3) return rank_part(0, s.hidden);
  if (member == &LlamaLayer::w2) return rank_part(1, s.hidden);
  return std::nullopt;  // the norms
}

std::optional<ShardSlice> classifier_slice(const LlamaConfig& c, const TensorParallel& tp) {
  const Split s = split_of(c, tp);
  if (s.vocab == c.vocab_size) return std::nullopt;
  return ShardSlice{0, tp.rank * s.vocab, s.vocab};
}

}  // namespace detail

LlamaModel shard_model(const LlamaModel& model, const TensorParallel& tp) {
  SG_CHECK(model.tensor_parallel().size == 1, "shard_model: the model is already a shard (rank ",
           model.tensor_parallel().rank, " of ", model.tensor_parallel().size, ")");
  SG_CHECK(
      !is_quantized(model), "shard_model: the model has quantized weights, which are not ",
      "split across ranks; shard the f32 model (a GGUF file's Q8_0/Q4_0 weights are ",
      "dequantized when it is loaded for tensor parallelism), then quantize_model() each shard");
  const LlamaConfig& c = model.config();
  // This rank's slice of the layer weight `member` (detail::shard_slice),
  // copied out so that the whole tensor can be released.
  const auto part = [&](const LlamaLayer& l, Tensor LlamaLayer::*member) {
    const std::optional<detail::ShardSlice> s = detail::shard_slice(c, tp, member);
    if (!s || !(l.*member).defined()) return l.*member;
    const Tensor slice = ops::narrow(l.*member, s->dim, s->start, s->count);
    Tensor out = ops::zeros(slice.sym_shape());
    ops::copy_(out, slice);
    return out;
  };
  const LlamaWeights& src = model.weights();
  LlamaWeights w;
  w.tok_embeddings = src.tok_embeddings;
  for (const LlamaLayer& l : src.layers) {
    LlamaLayer out;
    for (Tensor LlamaLayer::*member :
         {&LlamaLayer::attention_norm, &LlamaLayer::wq, &LlamaLayer::wk, &LlamaLayer::wv,
          &LlamaLayer::wo, &LlamaLayer::ffn_norm, &LlamaLayer::w1, &LlamaLayer::w2, &LlamaLayer::w3,
          &LlamaLayer::bq, &LlamaLayer::bk, &LlamaLayer::bv}) {
      out.*member = part(l, member);
    }
    w.layers.push_back(std::move(out));
  }
  w.norm = src.norm;
  // A shared classifier stays the embedding (the constructor takes this
  // rank's rows as a view); a separate one is cut here.
  const std::optional<detail::ShardSlice> rows = detail::classifier_slice(c, tp);
  if (!rows || src.output.shares_storage(src.tok_embeddings)) {
    w.output = src.output;
  } else {
    w.output = ops::zeros({rows->count, c.dim});
    ops::copy_(w.output, ops::narrow(src.output, 0, rows->start, rows->count));
  }
  return LlamaModel(c, std::move(w), tp);
}

}  // namespace sinkgraph::models
