#pragma once
// Note [Vectorized inner loops]
// The decode-shaped kernels (matrix-vector products, attention over a KV
// cache) spend their time in a few inner loops over contiguous f32 rows. Two
// things keep GCC from vectorizing those loops as written: a float sum is not
// associative, so a reduction must stay in order, and std::exp is a library
// call. Here each reduction says, with `#pragma omp simd reduction` (compiled
// with -fopenmp-simd: the pragma only, no OpenMP runtime), that it may be
// split across lanes, and exp is a polynomial the compiler can vectorize.
// Results differ from a sequential loop only in rounding (the kernels' naive
// reference tests bound it); eager and replay run the same code, so they
// still agree bitwise.
#include <bit>
#include <cstdint>
#include <limits>

namespace sinkgraph::kernels::cpu::vec {

// sum_i a[i] * b[i], in lanes.
inline float dot(const float* __restrict a, const float* __restrict b, std::int64_t n) {
  float s = 0.0F;
#pragma omp simd reduction(+ : s)
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// exp(x) for f32, vectorizable: x = n ln2 + r with |r| <= ln2/2, then
// 2^n * p(r) with p the degree-6 minimax polynomial of Cephes' expf.
// Relative error below 2e-7 over the range (tested against std::exp);
// inputs below -87.3 give 0, above 88.7 give +inf, NaN stays NaN.
inline float exp(float x) {
  constexpr float kHi = 88.72283935546875F;
  constexpr float kLo = -87.33654022216797F;
  constexpr float kLog2e = 1.44269504088896341F;
  constexpr float kLn2Hi = 0.693359375F;
  constexpr float kLn2Lo = -2.12194440e-4F;
  const bool over = x > kHi;
  const bool under = x < kLo;
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  // Round to nearest by the float magic constant (no call, vectorizes).
  constexpr float kMagic = 12582912.0F;  // 1.5 * 2^23
  const float t = xc * kLog2e + kMagic;
  const float n = t - kMagic;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  float p = 1.9875691500E-4F;
  p = p * r + 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  p = p * r2 + r + 1.0F;
  const auto bits = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t)) - 0x4B400000;
  // 2^n by building the exponent; n is in [-126, 128], so split in two
  // factors to stay normal at both ends.
  const std::int32_t n1 = bits >> 1;
  const std::int32_t n2 = bits - n1;
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>((n1 + 127) << 23));
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>((n2 + 127) << 23));
  const float y = p * s1 * s2;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return over ? kInf : (under ? 0.0F : (x != x ? x : y));
}

}  // namespace sinkgraph::kernels::cpu::vec
