// ReferenceLlama (reference.h): llama2.c's forward pass over plain float
// arrays, with sinkgraph's model semantics (src/models/llama.cpp and the CPU
// kernels in src/kernels/cpu/{transformer,rows,elementwise}.cpp).
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

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

}  // namespace

ReferenceLlama::ReferenceLlama(const sinkgraph::models::LlamaModel& model)
    : config_(model.config()) {
  const models::LlamaConfig& c = config_;
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
  std::fill(key_cache_.begin(), key_cache_.end(), 0.0F);
  std::fill(value_cache_.begin(), value_cache_.end(), 0.0F);
}

std::span<const float> ReferenceLlama::forward(std::int64_t token, std::int64_t pos) {
  const models::LlamaConfig& c = config_;
  if (token < 0 || token >= c.vocab_size) {
    throw std::out_of_range("ReferenceLlama: token " + std::to_string(token) +
                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  if (pos < 0 || pos >= c.max_seq_len) {
    throw std::out_of_range("ReferenceLlama: position " + std::to_string(pos) + " is outside [0, " +
                            std::to_string(c.max_seq_len) + ")");
  }
  const size_t dim = sz(c.dim), hidden = sz(c.hidden_dim), kv_dim = sz(c.kv_dim());
  const size_t head_size = sz(c.head_size()), n_heads = sz(c.n_heads);
  const size_t n_kv_heads = sz(c.n_kv_heads), seq_len = sz(c.max_seq_len);
  const size_t group = n_heads / n_kv_heads;  // query heads per kv head
  const size_t p = sz(pos);
  const auto eps = static_cast<float>(c.norm_eps);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
  const bool half = c.rope_style == ops::RopeStyle::half;

  // RoPE angles for this position, as the rope kernel: freq = 1 / theta^(2i/D) in f32.
  const auto theta = static_cast<float>(c.rope_theta);
  for (size_t i = 0; i < head_size / 2; ++i) {
    const float freq =
        1.0F / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_size));
    const float angle = static_cast<float>(pos) * freq;
    rope_cos_[i] = std::cos(angle);
    rope_sin_[i] = std::sin(angle);
  }

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

    // Each query head h attends over positions 0..pos of kv head h / group.
    for (size_t h = 0; h < n_heads; ++h) {
      const float* q = q_.data() + h * head_size;
      const size_t kv_off = (h / group) * head_size;
      float* att = att_.data();
      for (size_t t = 0; t <= p; ++t) {
        const float* k = key_layer + t * kv_dim + kv_off;
        float score = 0.0F;
        for (size_t i = 0; i < head_size; ++i) score += q[i] * k[i];
        att[t] = score * scale;
      }
      softmax(att, p + 1);
      float* out = xb_.data() + h * head_size;
      std::fill_n(out, head_size, 0.0F);
      for (size_t t = 0; t <= p; ++t) {
        const float* v = value_layer + t * kv_dim + kv_off;
        const float a = att[t];
        for (size_t i = 0; i < head_size; ++i) out[i] += a * v[i];
      }
    }
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

}  // namespace sinkgraph::e2e
