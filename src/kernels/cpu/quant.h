#pragma once
// Products with quantized weights (Note [Quantized weights] in
// include/sinkgraph/ops.h): one block of 32 values is widened to f32 in
// registers and multiplied into each row's sums. Inline, so that the tests
// (tests/ops/quant_test.cpp) run the vector path and the portable one
// against a naive reference.
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
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
// 16 signed bytes widened to 16 f32 lanes. The zero-masked forms (here and
// in widen_block) with every lane selected are the same instructions; GCC
// 12 warns that the plain forms' internal _mm512_undefined_* operand "may
// be used uninitialized" (-Wmaybe-uninitialized, an error here).
inline __m512 widen_i8(__m128i v) {
  return _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, v));
}
// Note [Q4_0 through a table]
// A Q4_0 value is one of 16: d * (nibble - 8). So the block's 16 products
// are computed once, into one register (d times the table -8 .. 7, one
// multiply), and each nibble picks its value with a permute (vpermps reads
// only the low 4 bits of each 32-bit index: a zero-extended byte indexes by
// its low nibble as it is, and the high nibbles need only a 16-bit shift
// first, no mask). Per block that is a shift, two extensions, a multiply
// and two permutes, where widening and converting each nibble took an and,
// a shift, an and, two extensions, two subtractions, two conversions and
// two multiplies: a 1.1B-shape decode step was bound by those instructions
// (the two vector ports), not by its reads: 9.6 tokens/s on 1 thread and
// 17.9-18.9 on 2 before, 12.6 and 22-24 after (the llama.cpp build of
// docs/performance.md ran the same file at 11.9 and 19.7-22.9). Each value
// is the same product d * (nibble - 8) in f32 as before, so the sums are
// bitwise unchanged.
inline __m512 q4_table(float d) {
  return _mm512_mul_ps(_mm512_set1_ps(d),
                       _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
}

// The block's values 0..15 and 16..31 as two vectors of d * q.
inline void widen_block(Format format, const std::uint8_t* block, __m512& lo, __m512& hi) {
  if (format == Format::q8_0) {
    const __m512 d = _mm512_set1_ps(block_scale(block));
    lo = _mm512_mul_ps(d, widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2))));
    hi = _mm512_mul_ps(d, widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18))));
  } else {  // Note [Q4_0 through a table]
    const __m512 table = q4_table(block_scale(block));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    lo = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, bytes), table);
    hi = _mm512_maskz_permutexvar_ps(
        0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_srli_epi16(bytes, 4)), table);
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// Note [Quantized blocks in eight lanes]
// Without AVX-512 (AVX2 machines: most AMD parts, Intel clients) a block is
// four vectors of eight: values 0-7, 8-15, 16-23 and 24-31, each d * q as
// the dequantizer computes it (q converted to f32 exactly, then one product
// with d). Each row keeps one sum per vector, and dot_rows reduces the four
// as the AVX-512 path reduces its two sixteen-lane sums (values k and k + 8
// of each half lie in one lane there): (0-7 + 16-23) + (8-15 + 24-31), then
// the lanes pairwise.
// Every lane's chain of multiply-adds is the AVX-512 path's, so the two give
// the same bits. Before this path, such machines ran dot_rows_portable: the
// scalar dequantizer and a scalar dot product per block, 6x (Q8_0) and 19x
// (Q4_0) slower in a 1.1B-shape decode step (docs/performance.md).

// Note [Blocks widened from memory]
// Each group of 8 bytes is sign- or zero-extended to 8 lanes straight from
// memory (vpmovsxbd / vpmovzxbd with a memory operand); one 16-byte load per
// half with its high 8 bytes moved down by a shuffle, and for Q4_0 the
// nibbles separated in bytes first, cost more: one thread, weights in L3,
// Q8_0 3.2 -> 2.3 ns a block and Q4_0 3.6-4.4 -> 3.0. A Q4_0 byte widened to
// 32 bits gives its low nibble by a mask and its high nibble by a shift.
inline __m128i load_8_bytes(const std::uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

// The block's values as four vectors of d * q: v[i] holds values 8i..8i+7.
inline void widen_block(Format format, const std::uint8_t* block, __m256 v[4]) {
  const __m256 d = _mm256_set1_ps(block_scale(block));
  if (format == Format::q8_0) {
    for (std::ptrdiff_t i = 0; i < 4; ++i) {
      const __m256i q = _mm256_cvtepi8_epi32(load_8_bytes(block + 2 + 8 * i));
      v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
    }
    return;
  }
  // Byte j holds value j in its low nibble and value j + 16 in its high one.
  const __m256i nibble = _mm256_set1_epi32(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  for (std::ptrdiff_t i = 0; i < 2; ++i) {  // bytes 8i..8i+7: values 8i.. and 16 + 8i..
    const __m256i bytes = _mm256_cvtepu8_epi32(load_8_bytes(block + 2 + 8 * i));
    const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(bytes, nibble), eight);
    const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
    v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo));
    v[i + 2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi));
  }
}
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
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
#elif defined(__AVX2__) && defined(__FMA__)
  // Note [Quantized blocks in eight lanes]: four sums per row.
  const std::int64_t bb = block_bytes(format);
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (auto& a : acc[r]) a = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(w + (b + kPrefetchBlocks) * bb), _MM_HINT_T0);
    __m256 v[4];
    widen_block(format, w + b * bb, v);
    for (int r = 0; r < R; ++r) {
      const float* xr = x[r] + b * kBlock;
      for (std::ptrdiff_t i = 0; i < 4; ++i)
        acc[r][i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8 * i), v[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    vec::F8 s =
        _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][2]), _mm256_add_ps(acc[r][1], acc[r][3]));
    *out[r] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  }
#else
  dot_rows_portable<R>(format, w, blocks, x, out);
#endif
}

}  // namespace sinkgraph::kernels::cpu::quant
