#pragma once
// Note [Vectorized inner loops]
// The decode-shaped kernels (matrix-vector products, attention over a KV
// cache) spend their time in a few inner loops over contiguous f32 rows. Two
// things keep GCC from vectorizing those loops as written: a float sum is not
// associative, so a reduction must stay in order, and std::exp is a library
// call. Here each reduction keeps eight partial sums in one vector (lane l
// sums elements l, l + 8, ...), written with the compiler's vector extension,
// and exp is a polynomial the compiler can vectorize. (Tried first and
// measured worse: `#pragma omp simd reduction`, which GCC 12 keeps in stack
// arrays zeroed with `rep stos` on every call, and plain lane arrays, which it
// vectorized across the wrong loop with 128-bit shuffles.)
// Results differ from a sequential loop only in rounding (the kernels' naive
// reference tests bound it); eager and replay run the same code, so they
// still agree bitwise.
//
// Note [Explicit fma]
// C++ lets GCC contract a * b + c into one fused multiply-add wherever it
// likes (-ffp-contract=fast is its default outside ISO C), and it chooses
// per inlined copy: the scalar tail of a two-row copy of the four-row dot
// product was contracted differently from the one-row copy's, so a batched
// linear's row differed from the same row alone in the last bit. So no
// multiply-add here is left to that choice: scalar tails call std::fma, and
// the lane loops call fmadd() below, one fused instruction where the target
// has one and a separate multiply and add where it has none (then there is
// nothing to contract into). A row's sum is then the same at any batch size,
// optimisation level or inlining (tests/ops/threads_test.cpp checks the rows
// bitwise).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#if (defined(__FMA__) && defined(__AVX__)) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace sinkgraph::kernels::cpu::vec {

// Eight f32 lanes (GCC/Clang vector extension: one AVX register with
// -march=native, two SSE registers without). Loads go through memcpy, so rows
// need no alignment. Vectors stay local to each function: none is passed or
// returned by value across a call (lambdas below are inlined), which keeps
// the calling convention out of it.
using F8 = float __attribute__((vector_size(32)));
inline constexpr std::int64_t kLanes = 8;

// c + a * b in each lane, rounded once where the target has a fused
// multiply-add (Note [Explicit fma]). The target is this build's (-march=native
// with SINKGRAPH_NATIVE), not a run-time choice.
inline F8 fmadd(F8 a, F8 b, F8 c) {
#if defined(__FMA__) && defined(__AVX__)
  return _mm256_fmadd_ps(a, b, c);
#elif defined(__FP_FAST_FMAF)
  F8 r;
  for (std::int64_t l = 0; l < kLanes; ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
#else
  return c + a * b;  // no fused instruction: nothing for the compiler to contract into
#endif
}

// Note [Operands held in registers]
// In a block of products (four weight rows against R rows of x), each
// vector loaded in a step feeds four or R multiply-adds. GCC 12 keeps one
// side in registers and folds the other side's loads into the
// multiply-adds, loading each vector again for every product it feeds:
// `perf annotate` of dot_rows_block4<4> showed 4 loads and 16
// multiply-adds with memory operands per step, 20 loads for 8 vectors,
// though the 16 sums and 8 vectors fit AVX-512's 32 registers. hold()
// passes a loaded vector through an empty asm that takes and gives it back
// in a register, so the compiler cannot fold the load into its uses: 8
// loads per step. The same operations in the same order, so the same bits.
// A standalone program with dot_rows_block4 over a 32000 x 288 weight
// (the built-in model's classifier) and 16 rows of x, one thread, medians
// of three runs: 5.6-6.6 ms with it against 7.9-8.8 without
// (docs/performance.md, "Operands held in registers").
template <class V>
inline void hold([[maybe_unused]] V& v) {
#if defined(__AVX__)
  asm("" : "+v"(v));
#endif
}

// x in every lane.
inline F8 splat(float x) { return F8{x, x, x, x, x, x, x, x}; }

// Adds the lanes pairwise.
#define SG_LANE_SUM(v) \
  ((((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))

// Note [Two vectors of eight in one register]
// dot() and dot_rows() keep two vectors of eight partial sums per product:
// p sums the 8-float chunks 0, 2, 4, ... of the row, q the chunks 1, 3, 5,
// ... So 16 consecutive floats are one chunk for p and the next for q, and
// on a CPU with AVX-512 the pair lives in one 16-float register (p in the
// low half, q in the high): one load of 16 floats and one multiply-add per
// operand do the work of two of each, lane by lane the same fused
// multiply-add in the same order, so every sum is bitwise what the 8-lane
// loop gives (and the callers' guarantees, a row the same alone or among
// others, eager and replay alike, stand). A decode step's products are
// bound by those loads: at 16 rows of a batch the row kernel issued ten
// loads per eight multiply-adds. Which loop is compiled is this build's
// target (-march=native), as for fmadd().
#if defined(__AVX512F__)
// p and q from the two halves of a 16-float register.
// (GCC's shuffles: its cast intrinsic trips -Wmaybe-uninitialized.)
inline void split_halves(__m512 v, F8& lo, F8& hi) {
  using F16 = float __attribute__((vector_size(64)));
  const auto w = static_cast<F16>(v);
  lo = __builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7);
  hi = __builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15);
}
#endif

#if defined(__AVX__)
// Note [Four lane sums at once]
// SG_LANE_SUM of four vectors a, b, c, d, in one register: each sum is
// ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)), the same additions of
// the same operands in the same order, so bitwise SG_LANE_SUM's. The halves
// of two vectors side by side give v0 + v4 .. v3 + v7 for both; two
// horizontal adds (which add neighbouring lanes, the first operand's lanes
// first) give the pairs and then the sums. A block of products of R rows of
// x against four weight rows ends in 4R sums; one at a time, each sum's
// extracts and scalar adds were 31% of dot_rows_block4<4>'s samples on the
// built-in model's batch of 16 (K = 288), against 69% for its loop.
inline __m128 lane_sums4(F8 a, F8 b, F8 c, F8 d) {
  const __m256 va = a, vb = b, vc = c, vd = d;
  // [a0+a4 .. a3+a7 | b0+b4 .. b3+b7] and the same for c and d
  const __m256 ab =
      _mm256_add_ps(_mm256_permute2f128_ps(va, vb, 0x20), _mm256_permute2f128_ps(va, vb, 0x31));
  const __m256 cd =
      _mm256_add_ps(_mm256_permute2f128_ps(vc, vd, 0x20), _mm256_permute2f128_ps(vc, vd, 0x31));
  // [(a0+a4)+(a1+a5), (a2+a6)+(a3+a7), the same of c | of b, of d]
  const __m256 pairs = _mm256_hadd_ps(ab, cd);
  // [sum a, sum c, sum a, sum c | sum b, sum d, sum b, sum d]
  const __m256 sums = _mm256_hadd_ps(pairs, pairs);
  return _mm_unpacklo_ps(_mm256_castps256_ps128(sums), _mm256_extractf128_ps(sums, 1));
}
#endif

// sum_i a[i] * b[i], in lanes (two vectors of partial sums per step, so two
// multiply-adds are in flight; Note [Two vectors of eight in one register]).
inline float dot(const float* a, const float* b, std::int64_t n) {
  F8 acc0 = {}, acc1 = {};
  std::int64_t i = 0;
#if defined(__AVX512F__)
  __m512 pq = _mm512_setzero_ps();
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    pq = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), pq);
  }
  split_halves(pq, acc0, acc1);
#else
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    F8 a0, b0, a1, b1;
    std::memcpy(&a0, a + i, sizeof a0);
    std::memcpy(&b0, b + i, sizeof b0);
    std::memcpy(&a1, a + i + kLanes, sizeof a1);
    std::memcpy(&b1, b + i + kLanes, sizeof b1);
    acc0 = fmadd(a0, b0, acc0);
    acc1 = fmadd(a1, b1, acc1);
  }
#endif
  for (; i + kLanes <= n; i += kLanes) {
    F8 va, vb;
    std::memcpy(&va, a + i, sizeof va);
    std::memcpy(&vb, b + i, sizeof vb);
    acc0 = fmadd(va, vb, acc0);
  }
  const F8 acc = acc0 + acc1;
  float s = SG_LANE_SUM(acc);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);  // Note [Explicit fma]
  return s;
}

// dot(a, b[j]) for R vectors b[0..R) at once (a read once for all): each
// bitwise dot's, its own two vectors of partial sums in the same order.
// Every loop over j is unrolled: one left rolled indexes p[j] and q[j] with a
// variable, so GCC keeps both arrays in memory, zeroes them with `rep stos`
// on every call and reduces them from the stack. At K = 288 that was most of
// the call (bench_linear, docs/performance.md "Batched decoding").
//
// kPrefetch: a streams from memory (a row of a large weight, Note [Rows of
// a linear]); each step also prefetches the line kStreamPrefetchBytes ahead
// of the one it loads, past the row's end into the next (Note [Prefetching
// a streamed weight]). The sums are the same either way.
#if defined(__AVX512F__)
// Note [Prefetching a streamed weight]
// One row of a large f32 weight at a time is a single sequential stream,
// and on the Intel VM one stream did not keep enough reads in flight: the
// hardware prefetcher does not follow it across a 4 KiB page, and a
// 1.1B-shape row is 8 KiB. Each step therefore prefetches the line 4 KiB
// ahead (one page; the quantized kernels' Note [Prefetching a row of
// blocks] is the same idea). On the 1.1B shape there (24 steps; that VM's
// speed drifted by about 10% over minutes, so only runs interleaved with
// each other compare): no prefetch, 3.0-3.2 tokens/s on 1 thread and
// 4.8-5.8 on 2; prefetched 4 KiB ahead, 3.55-3.65 and 5.5-6.5 (512 bytes
// ahead 3.1-3.35, 2 KiB 3.3-3.45, 8 KiB 3.5-3.6 on 1 thread; the T1 and T2
// hints the same, NTA 2.3-2.5).
//
// Walking two weight rows at once for a single row of x (two streams 8 KiB
// apart, each prefetched) was the path for a while: on the Intel VM it
// equalled one row on 1 thread (3.24-3.68 against 3.34-3.59) and gained a
// little on 2 (6.63-7.05 against 6.33-6.67). On an AMD EPYC VM with
// AVX-512 it halved the stream: summing 1.1 GB of 8 KiB rows, one row at a
// time read 30-31 GB/s with or without the prefetch, two at a time 16-17
// (two 8 KiB apart prefetched 8 KiB ahead 22, four 20-23, eight 23); that
// VM's plain read bandwidth is 28 GB/s. The 1.1B decode there, alternated
// over three rounds, the same ids: 3.78-4.05 -> 4.89-5.01 tokens/s on 1
// thread and 5.71-5.76 -> 6.25-6.38 on 2 with one row at a time, which is
// the path now.
//
// The prefetch brings the line into L2 (the T1 hint), not L1 (T0). On the
// Intel VM the hints measured alike (above). On another AMD EPYC VM with
// AVX-512, whose one thread reads 31-33 GB/s, a standalone sum of 1.1 GB of
// 8 KiB rows in 2 MiB pages (nine rounds per variant, interleaved, two
// runs, medians): T0 4 KiB ahead 25.7 and 26.9 GB/s, no prefetch 27.4 and
// 28.5, T1 30.3 and 30.6, T2 29.3 and 30.6; T0 at 1, 2 or 8 KiB, or on
// every line, 22.1-28.1 (in 4 KiB pages the same order, each lower).
// The 1.1B decode there, T0 against T1 alternated over four rounds (16
// steps): 4.82-4.92 -> 5.65-5.87 tokens/s on 1 thread, 7.03-7.13 ->
// 6.85-7.55 on 2 (docs/performance.md, "The streamed weight prefetched into
// L2"). The quantized kernels' prefetch (Note [Prefetching a row of blocks]
// in quant.h) keeps T0: T1 there measured no better.
inline constexpr std::int64_t kStreamPrefetchBytes = 4096;
#endif
template <int R, bool kPrefetch = false>
inline void dot_rows(const float* a, const float* const* b, std::int64_t n, float* const* out) {
  F8 p[R] = {}, q[R] = {};
  std::int64_t i = 0;
#if defined(__AVX512F__)
  __m512 pq[R] = {};
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(a + i) + kStreamPrefetchBytes, _MM_HINT_T1);
    }
    const __m512 va = _mm512_loadu_ps(a + i);
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) pq[j] = _mm512_fmadd_ps(va, _mm512_loadu_ps(b[j] + i), pq[j]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) split_halves(pq[j], p[j], q[j]);
#else
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    F8 a0, a1;
    std::memcpy(&a0, a + i, sizeof a0);
    std::memcpy(&a1, a + i + kLanes, sizeof a1);
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      F8 u0, u1;
      std::memcpy(&u0, b[j] + i, sizeof u0);
      std::memcpy(&u1, b[j] + i + kLanes, sizeof u1);
      p[j] = fmadd(a0, u0, p[j]);
      q[j] = fmadd(a1, u1, q[j]);
    }
  }
#endif
  for (; i + kLanes <= n; i += kLanes) {
    F8 va;
    std::memcpy(&va, a + i, sizeof va);
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      F8 u;
      std::memcpy(&u, b[j] + i, sizeof u);
      p[j] = fmadd(va, u, p[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const F8 acc = p[j] + q[j];
    float s = SG_LANE_SUM(acc);
    for (std::int64_t t = i; t < n; ++t) s = std::fma(a[t], b[j][t], s);
    *out[j] = s;
  }
}

// out[j][r] = dot(w + r * ldw, x[j]) for four weight rows r and R vectors
// x[0..R): each sum bitwise dot_rows()'s (the same two 8-lane partial sums
// over the same chunks). On AVX-512 the four rows' registers are blocked
// against the R vectors' (4 x R products of 16 floats per step from 4 + R
// loads, where four dot_rows calls load 4 + 4R), for the rows of a batch:
// linear_rows_f32 takes it for four or more rows of x. Elsewhere it is four
// dot_rows calls.
//
// Note [Prefetching the next weight rows]
// With kPrefetchNext each step also prefetches the same columns of the next
// four weight rows (w + 4 ldw onwards; past the weight's end for its last
// block, which a prefetch never faults on). linear_rows_f32 asks for it on
// the first pass over a block of a streamed weight: the block's later
// passes, for the batch's other rows of x, find it in L1, and without the
// prefetch the first pass waited on the weight's loads (perf on a batch of
// 16 on the built-in model: 40% of the kernel's samples on two of the four
// weight loads). On an AMD EPYC VM with AVX-512, batch 16 there went from
// 3,588-3,722 to 4,813-5,541 tokens/s on 2 threads (docs/performance.md,
// "Prefetching the next weight rows"). Prefetching eight rows ahead
// measured the same. The sums are the same either way. The hint is T1, into
// L2 (the first pass's own loads then bring the lines into L1): on the
// T1 paragraph's VM in Note [Prefetching a streamed weight], T0 against T1
// alternated over four rounds, batch 16 on the built-in model went from
// 2,073-2,180 to 2,621-2,722 tokens/s on 2 threads and from 1,133-1,163 to
// 1,425-1,534 on 1.
template <int R, bool kPrefetchNext = false>
inline void dot_rows_block4(const float* w, std::int64_t ldw, const float* const* x, std::int64_t n,
                            float* const* out) {
#if defined(__AVX512F__)
  __m512 pq[4][R] = {};
  std::int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    if constexpr (kPrefetchNext) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + (4 + r) * ldw + i), _MM_HINT_T1);
    }
    __m512 vw[4], vx[R];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      vw[r] = _mm512_loadu_ps(w + r * ldw + i);
      hold(vw[r]);  // Note [Operands held in registers]
    }
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      vx[j] = _mm512_loadu_ps(x[j] + i);
      hold(vx[j]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) pq[r][j] = _mm512_fmadd_ps(vw[r], vx[j], pq[r][j]);
    }
  }
  // Each sum's last eight-float chunk and p + q, as dot_rows ends them.
  const std::int64_t chunk_end = i + (n - i) / kLanes * kLanes;
  F8 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      F8 p, q;
      split_halves(pq[r][j], p, q);
      for (std::int64_t t = i; t < chunk_end; t += kLanes) {
        F8 va, u;
        std::memcpy(&va, w + r * ldw + t, sizeof va);
        std::memcpy(&u, x[j] + t, sizeof u);
        p = fmadd(va, u, p);
      }
      acc[j][r] = p + q;
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    float s[4];
    _mm_storeu_ps(s, lane_sums4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      for (std::int64_t t = chunk_end; t < n; ++t) s[r] = std::fma(w[r * ldw + t], x[j][t], s[r]);
    }
    std::memcpy(out[j], s, sizeof s);  // out[j][0..4): the four rows' sums
  }
#else
  for (int r = 0; r < 4; ++r) {
    float* o[R];
    for (int j = 0; j < R; ++j) o[j] = out[j] + r;
    dot_rows<R>(w + r * ldw, x, n, o);
  }
#endif
}

// sum_i x[i], in lanes.
inline float sum(const float* x, std::int64_t n) {
  F8 acc = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F8 v;
    std::memcpy(&v, x + i, sizeof v);
    acc += v;
  }
  float s = SG_LANE_SUM(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

// sum_i (x[i] - mean)^2, in lanes (a row's variance times n).
inline float sum_sq_dev(const float* x, std::int64_t n, float mean) {
  const F8 m = splat(mean);
  F8 acc = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F8 v;
    std::memcpy(&v, x + i, sizeof v);
    const F8 d = v - m;
    acc = fmadd(d, d, acc);
  }
  float s = SG_LANE_SUM(acc);
  for (; i < n; ++i) s = std::fma(x[i] - mean, x[i] - mean, s);
  return s;
}

// max_i x[i] (-inf for an empty row), in lanes. A NaN element is skipped, as
// by std::max(acc, x) in sequence.
inline float max(const float* x, std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  F8 acc = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F8 v;
    std::memcpy(&v, x + i, sizeof v);
    acc = v > acc ? v : acc;
  }
  float m = kNegInf;
  for (std::int64_t l = 0; l < kLanes; ++l) m = std::max(m, acc[l]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// out[j][r] = w[r, :] . x[j] for four weight rows r and R vectors x[0..R)
// (each weight row read once for all of them, x[j] once for the four rows).
// Each pair has its own lanes, summed in the same order whatever R is, so a
// pair's sum is bitwise the same at any R. At R = 4 the sixteen
// accumulators and eight loads of a step fit AVX-512's 32 vector registers;
// with 16 (AVX2) the compiler spills some, still correct. Every loop over r
// and j is unrolled, as in dot_rows: left rolled, the loop copying the four
// weight rows went through a stack array in 16-byte halves that the
// multiply-adds then read back 32 bytes wide (a failed store-to-load
// forward each), and stories260K's reduce-overhead decode step, all of
// whose weights take this path, ran at half its speed.
template <int R>
inline void dot4_rows(const float* w0, std::int64_t ldw, const float* const* x, std::int64_t n,
                      float* const* out) {
  const float* w[4] = {w0, w0 + ldw, w0 + 2 * ldw, w0 + 3 * ldw};
  F8 acc[R][4] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    F8 vw[4], vx[R];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      std::memcpy(&vw[r], w[r] + i, sizeof(F8));
      hold(vw[r]);  // Note [Operands held in registers]
    }
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      std::memcpy(&vx[j], x[j] + i, sizeof(F8));
      hold(vx[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[j][r] = fmadd(vw[r], vx[j], acc[j][r]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    float s[4];
#if defined(__AVX__)
    _mm_storeu_ps(s, lane_sums4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
#else
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) s[r] = SG_LANE_SUM(acc[j][r]);
#endif
    for (std::int64_t t = i; t < n; ++t) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) s[r] = std::fma(w[r][t], x[j][t], s[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) out[j][r] = s[r];
  }
}

// out[0..8) = sum_j w[j] * rows[j * stride + 0..8) for j < n: eight columns of
// a weighted sum of rows, the accumulators kept in registers (two, for even
// and odd j, so consecutive multiply-adds do not wait on each other).
inline void weighted_sum_8cols(const float* w, const float* rows, std::int64_t stride,
                               std::int64_t n, float* out) {
  F8 a0 = {}, a1 = {};
  std::int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    F8 v0, v1;
    std::memcpy(&v0, rows + j * stride, sizeof v0);
    std::memcpy(&v1, rows + (j + 1) * stride, sizeof v1);
    a0 = fmadd(splat(w[j]), v0, a0);
    a1 = fmadd(splat(w[j + 1]), v1, a1);
  }
  if (j < n) {
    F8 v;
    std::memcpy(&v, rows + j * stride, sizeof v);
    a0 = fmadd(splat(w[j]), v, a0);
  }
  const F8 a = a0 + a1;
  std::memcpy(out, &a, sizeof a);
}

// out[l] = q . rows[l] for the eight rows rows + l * stride (l < 8), with n a
// multiple of kLanes: eight vectors of partial sums, then one transposing
// reduction instead of eight horizontal ones.
inline void dot_8rows(const float* q, const float* rows, std::int64_t stride, std::int64_t n,
                      float* out) {
  F8 p[kLanes] = {};
  for (std::int64_t i = 0; i < n; i += kLanes) {
    F8 qv;
    std::memcpy(&qv, q + i, sizeof qv);
    for (std::int64_t l = 0; l < kLanes; ++l) {
      F8 kv;
      std::memcpy(&kv, rows + l * stride + i, sizeof kv);
      p[l] = fmadd(qv, kv, p[l]);
    }
  }
  // Pairs, then quads, then halves: lane l of the result sums all of p[l].
  const auto pairs = [](F8 a, F8 b) {
    return __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
  };
  const F8 t01 = pairs(p[0], p[1]), t23 = pairs(p[2], p[3]);
  const F8 t45 = pairs(p[4], p[5]), t67 = pairs(p[6], p[7]);
  const auto quads = [](F8 a, F8 b) {
    return __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
  };
  const F8 u0 = quads(t01, t23), u4 = quads(t45, t67);
  const F8 r = __builtin_shufflevector(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
  std::memcpy(out, &r, sizeof r);
}

#undef SG_LANE_SUM

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
  // Straight-line code (selects, no branches) so that a loop over exp
  // vectorizes (with -fno-trapping-math, src/CMakeLists.txt). NaN passes through the clamp and the
  // arithmetic as NaN.
  const float xc = std::min(std::max(x, kLo), kHi);
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
  const auto s1 = std::bit_cast<float>(static_cast<std::uint32_t>((n1 + 127) << 23));
  const auto s2 = std::bit_cast<float>(static_cast<std::uint32_t>((n2 + 127) << 23));
  float y = p * s1 * s2;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  y = x < kLo ? 0.0F : y;
  return y;
}

// erf(x) for f32, vectorizable (libm's erff is a call per value, 4% of a
// ViT's time in its GELUs): Abramowitz & Stegun 7.1.26,
//   erf(|x|) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-x^2),
//   t = 1 / (1 + p |x|),
// absolute error below 1.5e-7 in exact arithmetic, below 5e-7 in f32
// (tested against std::erf). It is the formula of ATen's vectorized CPU
// erf (Vectorized<float>::erf), which torch's GELU uses. ±inf give ±1, NaN
// stays NaN.
inline float erf(float x) {
  const float t = 1.0F / (1.0F + 0.3275911F * std::fabs(x));
  float r = 1.061405429F;
  r = r * t - 1.453152027F;
  r = r * t + 1.421413741F;
  r = r * t - 0.284496736F;
  r = r * t + 0.254829592F;
  return std::copysign(1.0F - r * t * exp(-x * x), x);
}

}  // namespace sinkgraph::kernels::cpu::vec
