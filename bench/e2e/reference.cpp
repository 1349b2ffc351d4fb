// ReferenceLlama (reference.h): llama2.c's forward pass over plain float
// arrays, with sinkgraph's model semantics (src/models/llama.cpp and the CPU
// kernels in src/kernels/cpu/{transformer,rows,elementwise}.cpp).
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <string>

#include <cblas.h>

namespace sinkgraph::e2e {
namespace {

using std::size_t;

// o = weight * (x / sqrt(mean(x^2) + eps)), as the rms_norm kernel.
void rmsnorm(float* o, const float* x, const float* weight, size_t n, float eps) {
  float ss = 0.0F;
  for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0F / std::sqrt(ss / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) o[i] = weight[i] * (scale * x[i]);
}

// xout[d] = W[d, n] @ x[n] (W row-major: output rows by input columns).
void matmul(float* xout, const float* x, const float* w, size_t n, size_t d) {
  for (size_t i = 0; i < d; ++i) {
    const float* row = w + i * n;
    float val = 0.0F;
    for (size_t j = 0; j < n; ++j) val += row[j] * x[j];
    xout[i] = val;
  }
}

// In-place softmax over x[0 .. n).
void softmax(float* x, size_t n) {
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0F;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0F / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

// Rotates each of `heads` heads of `vec` (head_size values each) by the
// angles whose cos/sin are given per pair: pairs (2i, 2i+1) when interleaved
// (llama2.c), (i, i + D/2) when half (Hugging Face).
void rope(float* vec, size_t heads, size_t head_size, const float* cos_t, const float* sin_t,
          bool half) {
  const size_t pairs = head_size / 2;
  for (size_t h = 0; h < heads; ++h) {
    float* v = vec + h * head_size;
    for (size_t i = 0; i < pairs; ++i) {
      const size_t i0 = half ? i : 2 * i;
      const size_t i1 = half ? i + pairs : 2 * i + 1;
      const float a = v[i0];
      const float b = v[i1];
      v[i0] = a * cos_t[i] - b * sin_t[i];
      v[i1] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

float silu(float x) { return x / (1.0F + std::exp(-x)); }

size_t sz(std::int64_t v) { return static_cast<size_t>(v); }

// y[rows, d] = x[rows, n] @ W[d, n]^T: one cblas_sgemm, one pass over W for
// every row. A single row takes forward()'s own loop instead: on this
// project's machines OpenBLAS's sgemv and M = 1 sgemm read a large W at well
// under the loop's speed (docs/performance.md, "Batched decoding").
void matmul_rows(float* y, const float* x, const float* w, size_t rows, size_t n, size_t d) {
  if (rows == 1) {
    matmul(y, x, w, n, d);
    return;
  }
  const auto ni = static_cast<int>(n), di = static_cast<int>(d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), di, ni, 1.0F, x, ni,
              w, ni, 0.0F, y, di);
}

// The RoPE angles of position `pos`, as the rope kernel: freq = 1 /
// theta^(2i/D) in f32.
void rope_angles(float* cos_t, float* sin_t, std::int64_t pos, size_t head_size, float theta) {
  for (size_t i = 0; i < head_size / 2; ++i) {
    const float freq =
        1.0F / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_size));
    const float angle = static_cast<float>(pos) * freq;
    cos_t[i] = std::cos(angle);
    sin_t[i] = std::sin(angle);
  }
}

struct Dims {
  size_t head_size, n_heads, kv_dim, group;  // group: query heads per kv head
  float scale;                               // 1 / sqrt(head_size)
};

// out[n_heads * head_size]: each query head h of `q` attends over positions
// 0..p of one layer's cache, kv head h / group. `att` holds p + 1 floats.
void attend(float* out, const float* q_all, const float* key_layer, const float* value_layer,
            size_t p, const Dims& d, float* att) {
  for (size_t h = 0; h < d.n_heads; ++h) {
    const float* q = q_all + h * d.head_size;
    const size_t kv_off = (h / d.group) * d.head_size;
    for (size_t t = 0; t <= p; ++t) {
      const float* k = key_layer + t * d.kv_dim + kv_off;
      float score = 0.0F;
      for (size_t i = 0; i < d.head_size; ++i) score += q[i] * k[i];
      att[t] = score * d.scale;
    }
    softmax(att, p + 1);
    float* o = out + h * d.head_size;
    std::fill_n(o, d.head_size, 0.0F);
    for (size_t t = 0; t <= p; ++t) {
      const float* v = value_layer + t * d.kv_dim + kv_off;
      const float a = att[t];
      for (size_t i = 0; i < d.head_size; ++i) o[i] += a * v[i];
    }
  }
}

Dims dims_of(const models::LlamaConfig& c) {
  return {sz(c.head_size()), sz(c.n_heads), sz(c.kv_dim()), sz(c.n_heads / c.n_kv_heads),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_size())))};
}

void check_token(const models::LlamaConfig& c, std::int64_t token, std::int64_t pos) {
  if (token < 0 || token >= c.vocab_size) {
    throw std::out_of_range("ReferenceLlama: token " + std::to_string(token) +
                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  if (pos < 0 || pos >= c.max_seq_len) {
    throw std::out_of_range("ReferenceLlama: position " + std::to_string(pos) + " is outside [0, " +
                            std::to_string(c.max_seq_len) + ")");
  }
}

}  // namespace

ReferenceLlama::ReferenceLlama(const sinkgraph::models::LlamaModel& model)
    : config_(model.config()) {
  const models::LlamaConfig& c = config_;
  if (c.attention_bias) {
    throw std::invalid_argument(
        "ReferenceLlama: the hand-written reference has no attention biases (a Qwen2 model)");
  }
  const models::LlamaWeights& w = model.weights();
  // to_floats() synchronizes the stream and copies out any dtype as f32.
  tok_embeddings_ = w.tok_embeddings.contiguous().to_floats();
  layers_.resize(sz(c.n_layers));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const models::LlamaLayer& src = w.layers[l];
    Layer& dst = layers_[l];
    dst.attention_norm = src.attention_norm.contiguous().to_floats();
    dst.wq = src.wq.contiguous().to_floats();
    dst.wk = src.wk.contiguous().to_floats();
    dst.wv = src.wv.contiguous().to_floats();
    dst.wo = src.wo.contiguous().to_floats();
    dst.ffn_norm = src.ffn_norm.contiguous().to_floats();
    dst.w1 = src.w1.contiguous().to_floats();
    dst.w2 = src.w2.contiguous().to_floats();
    dst.w3 = src.w3.contiguous().to_floats();
  }
  norm_ = w.norm.contiguous().to_floats();
  if (w.output.shares_storage(w.tok_embeddings)) {
    classifier_ = tok_embeddings_.data();
  } else {
    output_ = w.output.contiguous().to_floats();
    classifier_ = output_.data();
  }

  const size_t dim = sz(c.dim), kv_dim = sz(c.kv_dim()), hidden = sz(c.hidden_dim);
  x_.resize(dim);
  xb_.resize(dim);
  xb2_.resize(dim);
  hb_.resize(hidden);
  hb2_.resize(hidden);
  q_.resize(dim);
  k_.resize(kv_dim);
  v_.resize(kv_dim);
  att_.resize(sz(c.max_seq_len));
  logits_.resize(sz(c.vocab_size));
  rope_cos_.resize(sz(c.head_size() / 2));
  rope_sin_.resize(sz(c.head_size() / 2));
  key_cache_.assign(sz(c.n_layers) * sz(c.max_seq_len) * kv_dim, 0.0F);
  value_cache_.assign(key_cache_.size(), 0.0F);
}

void ReferenceLlama::reset() {
  for (auto* v : {&key_cache_, &value_cache_, &batch_.key_cache, &batch_.value_cache}) {
    std::fill(v->begin(), v->end(), 0.0F);
  }
}

std::span<const float> ReferenceLlama::forward(std::int64_t token, std::int64_t pos) {
  const models::LlamaConfig& c = config_;
  check_token(c, token, pos);
  const size_t dim = sz(c.dim), hidden = sz(c.hidden_dim), kv_dim = sz(c.kv_dim());
  const size_t head_size = sz(c.head_size()), n_heads = sz(c.n_heads);
  const size_t n_kv_heads = sz(c.n_kv_heads), seq_len = sz(c.max_seq_len);
  const size_t p = sz(pos);
  const auto eps = static_cast<float>(c.norm_eps);
  const bool half = c.rope_style == ops::RopeStyle::half;
  const Dims d = dims_of(c);
  rope_angles(rope_cos_.data(), rope_sin_.data(), pos, head_size, static_cast<float>(c.rope_theta));

  float* x = x_.data();
  std::copy_n(tok_embeddings_.data() + sz(token) * dim, dim, x);

  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    // Attention: q, k, v from the normed input; rotate q and k; append k, v to the cache.
    rmsnorm(xb_.data(), x, w.attention_norm.data(), dim, eps);
    matmul(q_.data(), xb_.data(), w.wq.data(), dim, dim);
    matmul(k_.data(), xb_.data(), w.wk.data(), dim, kv_dim);
    matmul(v_.data(), xb_.data(), w.wv.data(), dim, kv_dim);
    rope(q_.data(), n_heads, head_size, rope_cos_.data(), rope_sin_.data(), half);
    rope(k_.data(), n_kv_heads, head_size, rope_cos_.data(), rope_sin_.data(), half);
    float* key_layer = key_cache_.data() + l * seq_len * kv_dim;
    float* value_layer = value_cache_.data() + l * seq_len * kv_dim;
    std::copy_n(k_.data(), kv_dim, key_layer + p * kv_dim);
    std::copy_n(v_.data(), kv_dim, value_layer + p * kv_dim);
    attend(xb_.data(), q_.data(), key_layer, value_layer, p, d, att_.data());
    matmul(xb2_.data(), xb_.data(), w.wo.data(), dim, dim);
    for (size_t i = 0; i < dim; ++i) x[i] += xb2_[i];

    // SwiGLU feed-forward: w2(silu(w1 x) * w3 x).
    rmsnorm(xb_.data(), x, w.ffn_norm.data(), dim, eps);
    matmul(hb_.data(), xb_.data(), w.w1.data(), dim, hidden);
    matmul(hb2_.data(), xb_.data(), w.w3.data(), dim, hidden);
    for (size_t i = 0; i < hidden; ++i) hb_[i] = silu(hb_[i]) * hb2_[i];
    matmul(xb_.data(), hb_.data(), w.w2.data(), hidden, dim);
    for (size_t i = 0; i < dim; ++i) x[i] += xb_[i];
  }

  rmsnorm(x, x, norm_.data(), dim, eps);
  matmul(logits_.data(), x, classifier_, dim, sz(c.vocab_size));
  return logits_;
}

std::span<const float> ReferenceLlama::forward_batched(std::span<const std::int64_t> tokens,
                                                       std::span<const std::int64_t> pos,
                                                       std::span<const std::int64_t> slots) {
  const models::LlamaConfig& c = config_;
  if (tokens.size() != pos.size() || tokens.size() != slots.size() || tokens.empty()) {
    throw std::invalid_argument(
        "ReferenceLlama::forward_batched: tokens, pos and slots need one "
        "entry per row, and at least one row");
  }
  const size_t rows = tokens.size();
  std::set<std::int64_t> used;
  for (size_t r = 0; r < rows; ++r) {
    check_token(c, tokens[r], pos[r]);
    if (slots[r] < 0 || !used.insert(slots[r]).second) {
      throw std::invalid_argument("ReferenceLlama::forward_batched: slot " +
                                  std::to_string(slots[r]) + " is negative or used twice");
    }
  }
  const size_t dim = sz(c.dim), hidden = sz(c.hidden_dim), kv_dim = sz(c.kv_dim());
  const size_t head_size = sz(c.head_size()), n_heads = sz(c.n_heads);
  const size_t n_kv_heads = sz(c.n_kv_heads), seq_len = sz(c.max_seq_len);
  const size_t vocab = sz(c.vocab_size), layers = layers_.size();
  const auto eps = static_cast<float>(c.norm_eps);
  const bool half = c.rope_style == ops::RopeStyle::half;
  const Dims d = dims_of(c);

  Batch& b = batch_;
  if (b.x.size() < rows * dim) {
    for (auto* v : {&b.x, &b.xb, &b.xb2, &b.q}) v->resize(rows * dim);
    for (auto* v : {&b.hb, &b.hb2}) v->resize(rows * hidden);
    for (auto* v : {&b.k, &b.v}) v->resize(rows * kv_dim);
    b.logits.resize(rows * vocab);
  }
  const size_t slot_floats = layers * seq_len * kv_dim;
  const auto highest = static_cast<size_t>(*used.rbegin());
  if (highest >= b.slots) {
    b.slots = highest + 1;
    b.key_cache.resize(b.slots * slot_floats, 0.0F);
    b.value_cache.resize(b.slots * slot_floats, 0.0F);
  }

  for (size_t r = 0; r < rows; ++r) {
    std::copy_n(tok_embeddings_.data() + sz(tokens[r]) * dim, dim, b.x.data() + r * dim);
  }
  for (size_t l = 0; l < layers; ++l) {
    const Layer& w = layers_[l];
    for (size_t r = 0; r < rows; ++r) {
      rmsnorm(b.xb.data() + r * dim, b.x.data() + r * dim, w.attention_norm.data(), dim, eps);
    }
    matmul_rows(b.q.data(), b.xb.data(), w.wq.data(), rows, dim, dim);
    matmul_rows(b.k.data(), b.xb.data(), w.wk.data(), rows, dim, kv_dim);
    matmul_rows(b.v.data(), b.xb.data(), w.wv.data(), rows, dim, kv_dim);
    for (size_t r = 0; r < rows; ++r) {
      const size_t p = sz(pos[r]);
      rope_angles(rope_cos_.data(), rope_sin_.data(), pos[r], head_size,
                  static_cast<float>(c.rope_theta));
      float* q = b.q.data() + r * dim;
      float* k = b.k.data() + r * kv_dim;
      rope(q, n_heads, head_size, rope_cos_.data(), rope_sin_.data(), half);
      rope(k, n_kv_heads, head_size, rope_cos_.data(), rope_sin_.data(), half);
      const size_t layer_off = sz(slots[r]) * slot_floats + l * seq_len * kv_dim;
      float* key_layer = b.key_cache.data() + layer_off;
      float* value_layer = b.value_cache.data() + layer_off;
      std::copy_n(k, kv_dim, key_layer + p * kv_dim);
      std::copy_n(b.v.data() + r * kv_dim, kv_dim, value_layer + p * kv_dim);
      attend(b.xb.data() + r * dim, q, key_layer, value_layer, p, d, att_.data());
    }
    matmul_rows(b.xb2.data(), b.xb.data(), w.wo.data(), rows, dim, dim);
    for (size_t i = 0; i < rows * dim; ++i) b.x[i] += b.xb2[i];

    for (size_t r = 0; r < rows; ++r) {
      rmsnorm(b.xb.data() + r * dim, b.x.data() + r * dim, w.ffn_norm.data(), dim, eps);
    }
    matmul_rows(b.hb.data(), b.xb.data(), w.w1.data(), rows, dim, hidden);
    matmul_rows(b.hb2.data(), b.xb.data(), w.w3.data(), rows, dim, hidden);
    for (size_t i = 0; i < rows * hidden; ++i) b.hb[i] = silu(b.hb[i]) * b.hb2[i];
    matmul_rows(b.xb.data(), b.hb.data(), w.w2.data(), rows, hidden, dim);
    for (size_t i = 0; i < rows * dim; ++i) b.x[i] += b.xb[i];
  }
  for (size_t r = 0; r < rows; ++r) {
    float* x = b.x.data() + r * dim;
    rmsnorm(x, x, norm_.data(), dim, eps);
  }
  matmul_rows(b.logits.data(), b.x.data(), classifier_, rows, dim, vocab);
  return {b.logits.data(), rows * vocab};
}

}  // namespace sinkgraph::e2e
