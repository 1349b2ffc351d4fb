#pragma once
// Row kernels over one contiguous f32 row, shared by the operators that
// normalize rows (rms_norm, and fused operators that end in one) so that a
// fused kernel rounds exactly as the unfused one (Note [Vectorized inner loops]).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu {

// o[i] = w[i] * (x[i] / sqrt(mean(x^2) + eps)). `o` may alias `x`.
inline void rms_norm_row_f32(const float* x, const float* w, float* o, std::int64_t n, float eps) {
  const float ss = vec::dot(x, x, n);
  const float scale = 1.0F / std::sqrt(ss / static_cast<float>(n) + eps);
  for (std::int64_t i = 0; i < n; ++i) o[i] = w[i] * (scale * x[i]);
}

// One row of rms_norm in any floating storage type, strides in elements:
// f32 unit-stride rows take rms_norm_row_f32, the rest an f32 loop over
// load/store. The rms_norm kernel and every fused kernel that ends in one
// call this, so they round alike.
template <typename T>
inline void rms_norm_row(const T* x, std::int64_t xs, const T* w, std::int64_t ws, T* o,
                         std::int64_t os, std::int64_t n, float eps) {
  if constexpr (std::is_same_v<T, float>) {
    if (xs == 1 && ws == 1 && os == 1) {
      rms_norm_row_f32(x, w, o, n, eps);
      return;
    }
  }
  float ss = 0.0F;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = load(x + i * xs);
    ss += v * v;
  }
  const float scale = 1.0F / std::sqrt(ss / static_cast<float>(n) + eps);
  for (std::int64_t i = 0; i < n; ++i)
    store(o + i * os, load(w + i * ws) * (scale * load(x + i * xs)));
}

// o[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i], the mean and the
// biased variance over the row, each summed in lanes (Note [Vectorized inner
// loops]; two passes, the variance over x - mean, as torch's). `o` may alias
// `x`. Sequential sums here were a chain of dependent adds: 0.58 us a row
// of 256, 0.09-0.16 us in lanes (docs/performance.md, "LayerNorm in lanes").
inline void layer_norm_row_f32(const float* x, const float* w, const float* b, float* o,
                               std::int64_t n, float eps) {
  const float mean = vec::sum(x, n) / static_cast<float>(n);
  const float var = vec::sum_sq_dev(x, n, mean);
  const float inv = 1.0F / std::sqrt(var / static_cast<float>(n) + eps);
  for (std::int64_t i = 0; i < n; ++i) o[i] = std::fma((x[i] - mean) * inv, w[i], b[i]);
}

// o = softmax(x) over the row, given the row's maximum `mx`. `o` may alias
// `x`. (Long attention checks the maximum first: a row whose keys are all
// masked gives zeros, not this.)
inline void softmax_row_f32_from_max(const float* x, float* o, std::int64_t n, float mx) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = vec::exp(x[i] - mx);
  const float inv = 1.0F / vec::sum(o, n);
  for (std::int64_t i = 0; i < n; ++i) o[i] *= inv;
}

// o = softmax(x) over the row, max-subtracted. `o` may alias `x`.
inline void softmax_row_f32(const float* x, float* o, std::int64_t n) {
  softmax_row_f32_from_max(x, o, n, vec::max(x, n));
}

}  // namespace sinkgraph::kernels::cpu
