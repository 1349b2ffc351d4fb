#pragma once
// Row kernels over one contiguous f32 row, shared by the operators that
// normalize rows (rms_norm, and fused operators that end in one) so that a
// fused kernel rounds exactly as the unfused one (Note [Vectorized inner loops]).
#include <cmath>
#include <cstdint>

#include "vec.h"

namespace sinkgraph::kernels::cpu {

// o[i] = w[i] * (x[i] / sqrt(mean(x^2) + eps)). `o` may alias `x`.
inline void rms_norm_row_f32(const float* x, const float* w, float* o, std::int64_t n, float eps) {
  const float ss = vec::dot(x, x, n);
  const float scale = 1.0F / std::sqrt(ss / static_cast<float>(n) + eps);
  for (std::int64_t i = 0; i < n; ++i) o[i] = w[i] * (scale * x[i]);
}

// o = softmax(x) over the row, max-subtracted. `o` may alias `x`.
inline void softmax_row_f32(const float* x, float* o, std::int64_t n) {
  const float mx = vec::max(x, n);
  for (std::int64_t i = 0; i < n; ++i) o[i] = vec::exp(x[i] - mx);
  const float inv = 1.0F / vec::sum(o, n);
  for (std::int64_t i = 0; i < n; ++i) o[i] *= inv;
}

}  // namespace sinkgraph::kernels::cpu
