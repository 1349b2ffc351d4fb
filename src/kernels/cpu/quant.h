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
// The vector path: AVX2 for the integer sums, FMA for the f32 ones, F16C for
// the blocks' scales (every x86 CPU with AVX2 and FMA has F16C; the guard
// keeps a build for an unusual target flag set on the portable path).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SG_QUANT_VECTOR 1
#else
#define SG_QUANT_VECTOR 0
#endif

#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"
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
// products of values 4l .. 4l + 3, and each row of x keeps two sets of eight
// f32 sums, E for the even blocks and O for the odd ones: per block b, in
// order, S[l] = fma(float(isum[l]), dw * dx, S[l]) with S = E or O by b's
// parity; at the end a = E + O lane by lane, then
// ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)). Two sets, so that the
// multiply-adds form two dependency chains: with one, a Q4_0 product on one
// thread was bound by the chain's latency (a multiply-add's four cycles per
// block), not by its reads or instructions (docs/performance.md, "Q4_0's
// nibbles as they are"). An integer sum is
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

// Note [Q4_0's nibbles as they are]
// A Q4_0 value is its nibble minus 8, so a lane's sum is
// sum (n_j - 8) x_j = sum n_j x_j - 8 sum x_j. The vector path takes the
// nibbles as they are, unsigned (dpbusd and maddubs multiply unsigned by
// signed bytes, so no sign trick is needed), and starts each block's sums at
// -8 times the lane's sum of x, which quantize_row computes once per row of
// x (QuantizedRow::q4_offset), not once per weight row. The integers are the
// same, so are the bits. Measured on the 1.1B shape in docs/performance.md
// ("Q4_0's nibbles as they are"): the subtraction and the two sign
// instructions were three of a block's dozen and a half.

// One block of 32 activations: q (32 bytes) and its scale *d, written out
// as the note defines them; quantize_block below gives the same bits.
inline void quantize_block_portable(const float* x, std::int8_t* q, float* d) {
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

// A block's eight Q4_0 offsets from its quantized values (Note [Q4_0's
// nibbles as they are]): offset[l] = -8 * (q[4 l] + ... + q[4 l + 3]).
inline void q4_offsets_portable(const std::int8_t* q, std::int32_t* offset) {
  for (std::int64_t l = 0; l < 8; ++l) {
    const std::int8_t* v = q + 4 * l;
    offset[l] = -8 * (std::int32_t{v[0]} + v[1] + v[2] + v[3]);
  }
}

#if SG_QUANT_VECTOR
// The same block in registers, and its offsets where q4_offset is given.
// The same bits: the largest |x| is exact in any order; x * id is the same
// f32 product, and cvtps rounds it in the current rounding mode, as
// nearbyint does; the offsets are exact integer sums. Written out, the
// quantizer took 2.7% as many samples as the products themselves in a
// perf profile of a Q4_0 decode on the 1.1B shape (1 thread); in
// registers, 0.24% (docs/performance.md, "Activations quantized in
// registers"). Max-autotune's generated code carries the same steps in its
// prelude (sg_quantize32 in src/codegen/region.cpp, compiled at run time
// without this header); a change here is a change there, and
// tests/codegen/codegen_test.cpp compares the two bitwise.
inline void quantize_block_avx2(const float* x, std::int8_t* q, float* d, std::int32_t* q4_offset) {
  __m256 v[4];
  __m256 amax8 = _mm256_setzero_ps();
  __m256 finite8 = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256 sign = _mm256_set1_ps(-0.0F);
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  for (std::ptrdiff_t i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_andnot_ps(sign, v[i]);
    finite8 = _mm256_and_ps(finite8, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // false for NaN
    amax8 = _mm256_max_ps(amax8, a);
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const float amax = _mm_cvtss_f32(h);
  const bool finite = _mm256_movemask_ps(finite8) == 0xFF;
  if (!finite || amax < kTinyBlock) {
    *d = finite ? 0.0F : std::numeric_limits<float>::quiet_NaN();
    std::memset(q, 0, kBlock);
    if (q4_offset != nullptr) std::memset(q4_offset, 0, 8 * sizeof(std::int32_t));
    return;
  }
  *d = amax / 127.0F;
  const __m256 id = _mm256_set1_ps(127.0F / amax);
  __m256i n[4];
  for (int i = 0; i < 4; ++i) n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  // Packed within 128-bit halves: groups of four values in the order
  // 0, 2, 4, 6, 1, 3, 5, 7; the permutation puts them back. |n| <= 127, so
  // nothing saturates.
  const __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  if (q4_offset != nullptr) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q4_offset),
                        _mm256_madd_epi16(pairs, _mm256_set1_epi16(-8)));
  }
}
#endif

// One block of 32 activations: q (32 bytes) and its scale *d.
inline void quantize_block(const float* x, std::int8_t* q, float* d) {
#if SG_QUANT_VECTOR
  quantize_block_avx2(x, q, d, nullptr);
#else
  quantize_block_portable(x, q, d);
#endif
}

// A row of k activations (k a multiple of 32) as k / 32 blocks; with
// q4_offset, also each block's eight Q4_0 offsets (q4_offsets_portable's).
inline void quantize_row(const float* x, std::int64_t k, std::int8_t* q, float* d,
                         std::int32_t* q4_offset = nullptr) {
  for (std::int64_t b = 0; b < k / kBlock; ++b) {
    std::int32_t* offset = q4_offset == nullptr ? nullptr : q4_offset + 8 * b;
#if SG_QUANT_VECTOR
    quantize_block_avx2(x + b * kBlock, q + b * kBlock, d + b, offset);
#else
    quantize_block_portable(x + b * kBlock, q + b * kBlock, d + b);
    if (offset != nullptr) q4_offsets_portable(q + b * kBlock, offset);
#endif
  }
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

// One row of x, quantized: its values, one scale per block and, for Q4_0
// weights, eight offsets per block (quantize_row's; the vector path needs
// them, the portable one does not read them).
struct QuantizedRow {
  const std::int8_t* q = nullptr;
  const float* d = nullptr;
  const std::int32_t* q4_offset = nullptr;
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
  float acc[R][2][8] = {};  // per row of x, the even and the odd blocks' lanes
  std::int8_t v[kBlock];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const float dw = block_scale(w + b * bb);
    block_values(format, w + b * bb, v);
    for (int r = 0; r < R; ++r) {
      const float d = dw * x[r].d[b];
      const std::int8_t* xq = x[r].q + b * kBlock;
      float* lanes = acc[r][b % 2];
      for (int l = 0; l < 8; ++l) {
        std::int32_t s = 0;
        for (int j = 4 * l; j < 4 * l + 4; ++j) s += static_cast<std::int32_t>(v[j]) * xq[j];
        lanes[l] = std::fma(static_cast<float>(s), d, lanes[l]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = acc[r][0][l] + acc[r][1][l];
    *out[r] = reduce_lanes(lanes);
  }
}

#if SG_QUANT_VECTOR
// How far ahead of the block being read the weight is prefetched (Note
// [Prefetching a row of blocks]): 4 KiB, as for a streamed f32 row (Note
// [Prefetching a streamed weight] in vec.h), whatever the block's size.
// In Q8_0 blocks it was 128 (4.3 KiB; 32 gave 14.7 tokens/s on the 1.1B
// shape with 2 threads, 64 to 256 gave 17-18.5), and Q4_0 prefetched the
// same 128 blocks, only 2.3 KiB ahead (docs/performance.md, "On an Intel
// Xeon VM with AVX-512 FP16").
inline constexpr std::int64_t kPrefetchBytes = 4096;

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

// The same for unsigned weights in [0, 15] (Q4_0's nibbles; maddubs's pairs
// at most 2 * 15 * 127), started at `offset` (Note [Q4_0's nibbles as they
// are]).
inline __m256i lane_sums_from(__m256i offset, __m256i nibbles, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(offset, nibbles, x);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(offset, nibbles, x);
#else
  return _mm256_add_epi32(
      offset, _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, x), _mm256_set1_epi16(1)));
#endif
}

// A Q4_0 block's 32 nibbles as bytes, value j in byte j: its 16 bytes in
// both halves of the register, the upper half shifted right by 4, masked.
inline __m256i q4_nibbles(const std::uint8_t* block) {
  const __m256i bytes =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
  return _mm256_and_si256(_mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 4, 0, 0)),
                          _mm256_set1_epi8(0x0F));
}

// A block's scale in all eight lanes (block_scale's value).
inline __m256 block_scale8(const std::uint8_t* block) {
  std::uint16_t bits = 0;
  std::memcpy(&bits, block, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<std::int16_t>(bits)));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// R rows of x against one row of w, the note's sums: two sets of eight
// lanes per row of x, for the even and the odd blocks.
template <int R, Format F>
inline void dot_rows_avx2(const std::uint8_t* w, std::int64_t blocks, const QuantizedRow* x,
                          float* const* out) {
  constexpr std::int64_t bb = block_bytes(F);
  __m256 even[R];
  __m256 odd[R];
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm256_setzero_ps();
  const auto add_block = [&](std::int64_t b, __m256* acc) {
    // Note [Prefetching a row of blocks]: without it one thread read a
    // row of Q8_0 blocks at about half the rate the f32 kernel streams
    // (perf: the stalls were on the blocks' loads); the hardware
    // prefetcher alone does not run far enough ahead.
    const std::uint8_t* block = w + b * bb;
    _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes), _MM_HINT_T0);
    const __m256 dw = block_scale8(block);
    // Q8_0's signed bytes, or Q4_0's nibbles (unsigned as they are).
    const __m256i v = F == Format::q8_0 ? load32(block + 2) : q4_nibbles(block);
    const __m256i abs_v = _mm256_sign_epi8(v, v);  // Q8_0's only
    for (int r = 0; r < R; ++r) {
      const __m256i xq = load32(x[r].q + b * kBlock);
      __m256i sums;
      if constexpr (F == Format::q8_0) {
        sums = lane_sums(abs_v, _mm256_sign_epi8(xq, v));
      } else {
        sums = lane_sums_from(load32(x[r].q4_offset + 8 * b), v, xq);
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums),
                               _mm256_mul_ps(dw, _mm256_set1_ps(x[r].d[b])), acc[r]);
    }
  };
  std::int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    add_block(b, even);
    add_block(b + 1, odd);
  }
  if (b < blocks) add_block(b, even);
  for (int r = 0; r < R; ++r) {
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_add_ps(even[r], odd[r]));
    *out[r] = reduce_lanes(lanes);
  }
}
#endif

// out[r] = x[r] . row w (blocks of `format`), for R quantized rows of x at
// once: the row of w is read once for all R. Q4_0 needs the rows'
// q4_offset.
template <int R>
inline void dot_rows(Format format, const std::uint8_t* w, std::int64_t blocks,
                     const QuantizedRow* x, float* const* out) {
#if SG_QUANT_VECTOR
  if (format == Format::q8_0) {
    dot_rows_avx2<R, Format::q8_0>(w, blocks, x, out);
  } else {
    for (int r = 0; r < R; ++r)
      SG_ASSERT(x[r].q4_offset != nullptr, "quant::dot_rows: Q4_0 needs the rows' q4_offset");
    dot_rows_avx2<R, Format::q4_0>(w, blocks, x, out);
  }
#else
  dot_rows_portable<R>(format, w, blocks, x, out);
#endif
}

}  // namespace sinkgraph::kernels::cpu::quant
