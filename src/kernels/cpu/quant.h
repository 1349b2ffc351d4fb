#pragma once
// Products with quantized weights (Note [Quantized weights] in
// include/sinkgraph/ops.h): one block of 32 values is widened to f32 in
// registers and multiplied into each row's sums. Inline, so that the tests
// (tests/ops/quant_test.cpp) run the vector path and the portable one
// against a naive reference.
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "sinkgraph/dtype.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu::quant {

// The formats, numbered as ops::QuantFormat (the operators' `format`
// argument; cpu_kernels.cpp checks that they agree).
enum class Format : std::int64_t { q8_0 = 0, q4_0 = 1 };
inline constexpr std::int64_t kBlock = 32;
inline constexpr std::int64_t block_bytes(Format f) {
  return f == Format::q8_0 ? 2 + kBlock : 2 + kBlock / 2;
}

// A block's f16 scale as f32: one instruction where the target has F16C
// (the portable conversion branches on subnormals, and cost more than the
// block's 32 multiply-adds); the same value either way.
inline float block_scale(const std::uint8_t* block) {
  std::uint16_t bits = 0;
  std::memcpy(&bits, block, 2);
#if defined(__F16C__)
  return _cvtsh_ss(bits);
#else
  return f16_to_f32(bits);
#endif
}

// The 32 values of one block, d * q in f32: what the dequantizer gives.
inline void dequantize_block(Format format, const std::uint8_t* block, float* out) {
  const float d = block_scale(block);
  const std::uint8_t* q = block + 2;
  if (format == Format::q8_0) {
    for (std::int64_t j = 0; j < kBlock; ++j)
      out[j] = d * static_cast<float>(static_cast<std::int8_t>(q[j]));
  } else {
    for (std::int64_t j = 0; j < kBlock / 2; ++j) {
      out[j] = d * static_cast<float>((q[j] & 0x0F) - 8);
      out[j + kBlock / 2] = d * static_cast<float>((q[j] >> 4) - 8);
    }
  }
}

// Portable: out[r] = sum over blocks b, in order, of the block's 32
// products x[r][32b + j] * w[j] summed j = 0..31 in order.
template <int R>
inline void dot_rows_portable(Format format, const std::uint8_t* w, std::int64_t blocks,
                              const float* const* x, float* const* out) {
  const std::int64_t bb = block_bytes(format);
  float acc[R] = {};
  float v[kBlock];
  for (std::int64_t b = 0; b < blocks; ++b) {
    dequantize_block(format, w + b * bb, v);
    for (int r = 0; r < R; ++r) {
      float s = 0;
      for (std::int64_t j = 0; j < kBlock; ++j) s += x[r][b * kBlock + j] * v[j];
      acc[r] += s;
    }
  }
  for (int r = 0; r < R; ++r) *out[r] = acc[r];
}

#if defined(__AVX512F__)
// 16 bytes widened to 16 f32 lanes, signed or not. The zero-masked forms
// with every lane selected are the same instructions; GCC 12 warns that the
// plain forms' internal _mm512_undefined_* operand "may be used
// uninitialized" (-Wmaybe-uninitialized, an error here).
inline __m512 widen_i8(__m128i v) {
  return _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, v));
}
inline __m512 widen_u4(__m128i v) {  // bytes holding 0..15, minus 8
  const __m512i wide = _mm512_maskz_cvtepu8_epi32(0xFFFF, v);
  return _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(wide, _mm512_set1_epi32(8)));
}

// The block's values 0..15 and 16..31 as two vectors of d * q.
inline void widen_block(Format format, const std::uint8_t* block, __m512& lo, __m512& hi) {
  const __m512 d = _mm512_set1_ps(block_scale(block));
  if (format == Format::q8_0) {
    lo = _mm512_mul_ps(d, widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2))));
    hi = _mm512_mul_ps(d, widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18))));
  } else {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    const __m128i mask = _mm_set1_epi8(0x0F);
    lo = _mm512_mul_ps(d, widen_u4(_mm_and_si128(bytes, mask)));
    hi = _mm512_mul_ps(d, widen_u4(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
  }
}
#endif

#if defined(__AVX512F__)
// How far ahead of the block being read the next is prefetched (Note
// [Prefetching a row of blocks]): 128 blocks, 4.3 KiB of Q8_0 (32 gave
// 14.7 tokens/s on the 1.1B shape with 2 threads, 64 to 256 gave 17-18.5).
inline constexpr std::int64_t kPrefetchBlocks = 128;
#endif

// out[r] = x[r] . row w (blocks of `format`), for R rows of x at once: the
// row of w is read once for all R.
template <int R>
inline void dot_rows(Format format, const std::uint8_t* w, std::int64_t blocks,
                     const float* const* x, float* const* out) {
#if defined(__AVX512F__)
  // Two sums per row (a block's first and second halves), so that one
  // row's multiply-adds form two dependency chains, not one.
  const std::int64_t bb = block_bytes(format);
  __m512 acc_lo[R];
  __m512 acc_hi[R];
  for (int r = 0; r < R; ++r) acc_lo[r] = acc_hi[r] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    // Note [Prefetching a row of blocks]: without it one thread read a
    // row of Q8_0 blocks at about half the rate the f32 kernel streams
    // (perf: the stalls were on the blocks' loads); the hardware
    // prefetcher alone does not run far enough ahead of ~12 instructions
    // per 34 bytes.
    _mm_prefetch(reinterpret_cast<const char*>(w + (b + kPrefetchBlocks) * bb), _MM_HINT_T0);
    __m512 lo;
    __m512 hi;
    widen_block(format, w + b * bb, lo, hi);
    for (int r = 0; r < R; ++r) {
      const float* xr = x[r] + b * kBlock;
      acc_lo[r] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), lo, acc_lo[r]);
      acc_hi[r] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), hi, acc_hi[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    vec::F8 p;
    vec::F8 q;
    vec::split_halves(_mm512_add_ps(acc_lo[r], acc_hi[r]), p, q);
    const vec::F8 s = p + q;  // then the lanes pairwise, as vec::dot
    *out[r] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  }
#else
  dot_rows_portable<R>(format, w, blocks, x, out);
#endif
}

}  // namespace sinkgraph::kernels::cpu::quant
