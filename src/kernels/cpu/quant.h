#pragma once
// Products with quantized weights (Note [Quantized weights] in
// include/sinkgraph/ops.h): each row of x is quantized per block of 32 to
// 8-bit integers, and a weight block and an activation block give exact
// integer sums, scaled into f32 sums (Note [Activations quantized per
// block]). Inline, so that the tests (tests/ops/quant_test.cpp) run the
// vector path and the portable one against a naive reference.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__AVX2__) || defined(__F16C__)
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

// Note [Activations quantized per block]
// linear_q quantizes each row of x per block of 32 values, as llama.cpp does
// for its Q8_0 and Q4_0 products: the block's scale is dx = amax / 127 (amax
// the largest |x|; kept in f32, where llama.cpp rounds it to f16) and its
// values q = nearbyint(x * (127 / amax)), integers in [-127, 127]. A weight
// block (32 signed values: Q8_0's bytes, Q4_0's nibbles minus 8) and an
// activation block then give eight exact integer sums, lane l summing the
// products of values 4l .. 4l + 3, and each row of x keeps eight f32 sums:
// per block, in order, acc[l] = fma(float(isum[l]), dw * dx, acc[l]); at the
// end ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)). (Two sets of sums,
// for the even and the odd blocks, so that the multiply-adds form two
// dependency chains, measured the same on the 1.1B shape: 15.0-20.6 tokens/s
// against 16.0-17.0 for Q8_0 on 1 thread, alternated over three rounds.)
// An integer sum is
// exact whichever instructions compute it (maddubs and madd, or VNNI's
// dpbusd), so the portable path, the vector path and max-autotune's
// generated code (the prelude's sg_dot_q in src/codegen/region.cpp) give the
// same bits.
//
// Why: with f32 activations each block was widened to 32 f32 lanes and
// multiplied in f32, and on an AMD EPYC VM (AVX-512) a 1.1B-shape decode
// step was bound by those instructions, not by its reads (docs/performance.md,
// "Activations quantized per block"). The integer product reads a quarter of
// the activation bytes and does a block in about six vector instructions.
//
// What it costs: |x_j - dx q_j| <= dx / 2, so a result is off from x . w
// (w the dequantized weights) by at most sum over blocks of
// dx_b / 2 * sum_j |w_j| plus f32 rounding (tests/ops/quant_test.cpp checks
// that bound against a float64 reference); measured on models in
// docs/model.md. A block whose amax is not finite (an inf or a NaN in it)
// gets dx = NaN, so the row's results are NaN, as an f32 product's would be,
// never a finite number; a block whose amax is below 2^-100 (where 127 / amax
// could overflow) counts as zeros, an error below 2^-95 of sum |w_j|.
inline constexpr float kTinyBlock = 0x1p-100F;

// One block of 32 activations: q (32 bytes) and its scale *d.
inline void quantize_block(const float* x, std::int8_t* q, float* d) {
  float amax = 0;
  int finite = 1;
  for (std::int64_t j = 0; j < kBlock; ++j) {
    const float a = std::fabs(x[j]);
    finite &= static_cast<int>(a <= std::numeric_limits<float>::max());
    amax = a > amax ? a : amax;
  }
  if (finite == 0 || amax < kTinyBlock) {
    *d = finite == 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0F;
    std::memset(q, 0, kBlock);
    return;
  }
  *d = amax / 127.0F;
  const float id = 127.0F / amax;
  for (std::int64_t j = 0; j < kBlock; ++j)
    q[j] = static_cast<std::int8_t>(static_cast<int>(std::nearbyint(x[j] * id)));
}

// A row of k activations (k a multiple of 32) as k / 32 blocks.
inline void quantize_row(const float* x, std::int64_t k, std::int8_t* q, float* d) {
  for (std::int64_t b = 0; b < k / kBlock; ++b)
    quantize_block(x + b * kBlock, q + b * kBlock, d + b);
}

// A weight block's 32 values as signed integers: Q8_0's bytes as they are,
// Q4_0's nibbles minus 8 (value j is the low nibble of byte j, value j + 16
// its high nibble).
inline void block_values(Format format, const std::uint8_t* block, std::int8_t* v) {
  const std::uint8_t* q = block + 2;
  if (format == Format::q8_0) {
    std::memcpy(v, q, kBlock);
    return;
  }
  for (std::int64_t j = 0; j < kBlock / 2; ++j) {
    v[j] = static_cast<std::int8_t>((q[j] & 0x0F) - 8);
    v[j + kBlock / 2] = static_cast<std::int8_t>((q[j] >> 4) - 8);
  }
}

// One row of x, quantized: its values and one scale per block.
struct QuantizedRow {
  const std::int8_t* q;
  const float* d;
};

// The lanes reduced as every path reduces them (Note [Activations quantized
// per block]).
inline float reduce_lanes(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// Portable: the note's sums, written out.
template <int R>
inline void dot_rows_portable(Format format, const std::uint8_t* w, std::int64_t blocks,
                              const QuantizedRow* x, float* const* out) {
  const std::int64_t bb = block_bytes(format);
  float acc[R][8] = {};
  std::int8_t v[kBlock];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const float dw = block_scale(w + b * bb);
    block_values(format, w + b * bb, v);
    for (int r = 0; r < R; ++r) {
      const float d = dw * x[r].d[b];
      const std::int8_t* xq = x[r].q + b * kBlock;
      for (int l = 0; l < 8; ++l) {
        std::int32_t s = 0;
        for (int j = 4 * l; j < 4 * l + 4; ++j) s += static_cast<std::int32_t>(v[j]) * xq[j];
        acc[r][l] = std::fma(static_cast<float>(s), d, acc[r][l]);
      }
    }
  }
  for (int r = 0; r < R; ++r) *out[r] = reduce_lanes(acc[r]);
}

#if defined(__AVX2__) && defined(__FMA__)
// How far ahead of the block being read the next is prefetched (Note
// [Prefetching a row of blocks]): 128 blocks, 4.3 KiB of Q8_0 (32 gave
// 14.7 tokens/s on the 1.1B shape with 2 threads, 64 to 256 gave 17-18.5).
inline constexpr std::int64_t kPrefetchBlocks = 128;

// The weight block's values as 32 signed bytes (block_values in a register).
inline __m256i block_values(Format format, const std::uint8_t* block) {
  if (format == Format::q8_0)
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m256i values = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), nibble),
                                          _mm_and_si128(bytes, nibble));
  return _mm256_sub_epi8(values, _mm256_set1_epi8(8));
}

// Eight exact sums of four products each, of |w| (unsigned) and x with w's
// sign: |w| <= 128 and |x| <= 127, so maddubs's pairs never saturate.
inline __m256i lane_sums(__m256i abs_w, __m256i signed_x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), abs_w, signed_x);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), abs_w, signed_x);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, signed_x), _mm256_set1_epi16(1));
#endif
}
#endif

// out[r] = x[r] . row w (blocks of `format`), for R quantized rows of x at
// once: the row of w is read once for all R.
template <int R>
inline void dot_rows(Format format, const std::uint8_t* w, std::int64_t blocks,
                     const QuantizedRow* x, float* const* out) {
#if defined(__AVX2__) && defined(__FMA__)
  const std::int64_t bb = block_bytes(format);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    // Note [Prefetching a row of blocks]: without it one thread read a
    // row of Q8_0 blocks at about half the rate the f32 kernel streams
    // (perf: the stalls were on the blocks' loads); the hardware
    // prefetcher alone does not run far enough ahead.
    _mm_prefetch(reinterpret_cast<const char*>(w + (b + kPrefetchBlocks) * bb), _MM_HINT_T0);
    const std::uint8_t* block = w + b * bb;
    const float dw = block_scale(block);
    const __m256i v = block_values(format, block);
    const __m256i abs_v = _mm256_sign_epi8(v, v);
    for (int r = 0; r < R; ++r) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].q + b * kBlock));
      const __m256i sums = lane_sums(abs_v, _mm256_sign_epi8(xq, v));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(dw * x[r].d[b]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float lanes[8];
    _mm256_storeu_ps(lanes, acc[r]);
    *out[r] = reduce_lanes(lanes);
  }
#else
  dot_rows_portable<R>(format, w, blocks, x, out);
#endif
}

}  // namespace sinkgraph::kernels::cpu::quant
