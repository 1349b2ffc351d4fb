#include <atomic>
#include <mutex>

#include <cblas.h>

#include "blas.h"
#include "common.h"
#include "kernels.h"
#include "onednn.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu {

namespace {

// A 2-D f32 matrix in BLAS terms: row-major with leading dimension `ld`,
// transposed when the column stride is not 1.
struct Mat {
  const float* ptr;
  std::int64_t rows, cols, ld;
  bool trans;
};

// Describes the last two dims of `t` at element offset `offset` for BLAS,
// packing into `scratch` (as f32, row-major) when the layout or dtype needs it.
Mat describe(const TensorArg& t, std::int64_t offset, std::vector<float>& scratch) {
  const int nd = t.ndim;
  const std::int64_t rows = t.sizes[nd - 2];
  const std::int64_t cols = t.sizes[nd - 1];
  const std::int64_t rs = t.strides[nd - 2];
  const std::int64_t cs = t.strides[nd - 1];
  if (t.dtype == DType::f32) {
    const float* p = static_cast<const float*>(t.data) + offset;
    if (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) return {p, rows, cols, rs, false};
    if (rs == 1 && cs >= std::max<std::int64_t>(rows, 1)) return {p, rows, cols, cs, true};
    if (rows <= 1 && cs == 1) return {p, rows, cols, std::max<std::int64_t>(cols, 1), false};
  }
  scratch.resize(static_cast<std::size_t>(rows * cols));
  dispatch_float(t.dtype, [&]<typename T>() {
    const T* p = static_cast<const T*>(t.data) + offset;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c)
        scratch[static_cast<std::size_t>(r * cols + c)] = load(p + r * rs + c * cs);
    }
  });
  return {scratch.data(), rows, cols, std::max<std::int64_t>(cols, 1), false};
}

}  // namespace

// Never two thread pools against each other (Note [Compute threads]): the
// compute threads are ours, and OpenBLAS runs on one of them, single
// threaded. Debian's serial build has no threads of its own; were a threaded
// build linked, this keeps it to one.
void keep_blas_serial() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Note [OpenBLAS is not reentrant]
// Debian's serial OpenBLAS (0.3.21, built SINGLE_THREADED without
// USE_LOCKING) keeps its packing buffers in a process-wide table with no
// lock: two threads inside sgemm at once can be handed the same buffer and
// silently compute garbage. Every stream runs its kernels on a worker thread
// of its own, so two streams doing matrix products at once did exactly that
// (found by tests/compiler/replay_stress_test.cpp: 3 to 76 wrong results in
// 12,000 eager MLP calls from two threads on their own streams). Every BLAS
// call therefore holds this one lock: uncontended it costs one atomic pair per
// product; contended, products on different streams take turns.
std::mutex& blas_mutex() {
  static std::mutex mutex;
  return mutex;
}

namespace {

// out[M, N] = a[M, K] @ b[K, N], all f32 descriptions; out row-major with ld.
void gemm(const Mat& a, const Mat& b, float* out, std::int64_t ldo) {
  const auto m = static_cast<blasint>(a.rows);
  const auto n = static_cast<blasint>(b.cols);
  const auto k = static_cast<blasint>(a.cols);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t r = 0; r < m; ++r) std::fill(out + r * ldo, out + r * ldo + n, 0.0F);
    return;
  }
  if (m == 1) {
    // One row: out[N] = b^T a, a matrix-vector product.
    const auto trans = b.trans ? CblasNoTrans : CblasTrans;
    const auto rows = static_cast<blasint>(b.trans ? b.cols : b.rows);
    const auto cols = static_cast<blasint>(b.trans ? b.rows : b.cols);
    const auto inc_a = static_cast<blasint>(a.trans ? a.ld : 1);
    const std::lock_guard blas(blas_mutex());  // Note [OpenBLAS is not reentrant]
    cblas_sgemv(CblasRowMajor, trans, rows, cols, 1.0F, b.ptr, static_cast<blasint>(b.ld), a.ptr,
                inc_a, 0.0F, out, 1);
    return;
  }
  const std::lock_guard blas(blas_mutex());  // Note [OpenBLAS is not reentrant]
  cblas_sgemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans,
              b.trans ? CblasTrans : CblasNoTrans, m, n, k, 1.0F, a.ptr, static_cast<blasint>(a.ld),
              b.ptr, static_cast<blasint>(b.ld), 0.0F, out, static_cast<blasint>(ldo));
}

// The tiled kernel's block (Note [Products of many rows]): kTileRows rows of
// x by kTileCols columns of out, over up to kTileDepth of K at a time.
constexpr std::int64_t kTileCols = 16, kTileRows = 6, kTileDepth = 512;

// out[M, N] = x[M, K] @ w[N, K]^T for f32 rows, on the compute threads:
// linear_rows_f32 up to kMaxKernelRows rows of x (Note [Rows of a linear]),
// linear_tiles_f32 past them (Note [Products of many rows]).
void linear_f32(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx, float* out,
                std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
                KernelContext& ctx);
void tiles_f32(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
               float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
               KernelContext& ctx, bool any_order = false);

// Note [A linear's rows and a matmul's]
// linear keeps its row kernel up to kMaxKernelRows rows for batch
// invariance (Note [Rows of a linear]): batched decoding builds its products
// as linear. matmul promises no such thing (nor does torch), so a b that is
// the transpose of a row-major w[N, K] (an nn.Linear as the PyTorch front
// end converts it past kMatmulRowKernelRows rows: matmul(x, w^T)) runs
// oneDNN's matmul past that many rows where the build has it, which
// measured 1.5-1.8x the row kernel at 8 to 32 rows on one thread
// (bench_linear, BM_MatmulTransposedW against BM_Linear; docs/performance.md
// "A torch linear's rows"), and linear's kernels otherwise. A row-major
// b[K, N] (attention's probabilities @ v) at least kTileCols wide runs the
// tiled kernel at any number of rows (Note [Products of many rows]).
// Anything else runs OpenBLAS on one thread.
constexpr std::int64_t kMatmulRowKernelRows = 8;

// out[M, N] = a @ b with rows of a contiguous, on the compute threads
// (Note [A linear's rows and a matmul's]).
void product(const Mat& a, const Mat& b, float* out, std::int64_t ldo, KernelContext& ctx) {
  if (!a.trans && a.rows > 0 && a.cols > 0 && b.trans && b.cols > 0) {
    if (a.rows > kMatmulRowKernelRows &&
        onednn::matmul(b.ptr, b.ld, 1, a.ptr, a.ld, out, ldo, a.rows, b.cols, a.cols, ctx))
      return;
    linear_f32(b.ptr, b.ld, a.ptr, a.ld, out, ldo, a.rows, b.cols, a.cols, ctx);
    return;
  }
  // Narrower than one block of columns (a matrix-vector a @ v) would waste
  // most of each block's multiply-adds: OpenBLAS.
  if (!a.trans && a.rows > 0 && a.cols > 0 && b.cols >= kTileCols) {
    tiles_f32(b.ptr, 1, b.ld, a.ptr, a.ld, out, ldo, a.rows, b.cols, a.cols, ctx);
    return;
  }
  gemm(a, b, out, ldo);
}

// Batched matmul: a[B..., M, K] @ b[B'..., K, N] -> out[B..., M, N], where b's
// batch dims broadcast against a's (a 2-D b is shared by every batch).
void batched(const TensorArg& a, const TensorArg& b, const TensorArg& out, KernelContext& ctx) {
  keep_blas_serial();
  const int nd = out.ndim;
  const std::int64_t m = out.sizes[nd - 2];
  const std::int64_t n = out.sizes[nd - 1];
  std::int64_t batch = 1;
  for (int i = 0; i < nd - 2; ++i) batch *= out.sizes[i];

  // a with contiguous rows over its batch dims folds into one big GEMM.
  const bool fold = b.ndim == 2 && a.dtype == DType::f32 && out.dtype == DType::f32 &&
                    out.is_contiguous() && a.strides[a.ndim - 1] == 1 && [&] {
                      // Each batch dim must step over exactly the rows inside it; a size-1
                      // dim's stride is never used, so it neither counts nor resets the step.
                      std::int64_t expect = a.strides[a.ndim - 2] * a.sizes[a.ndim - 2];
                      for (int i = a.ndim - 3; i >= 0; --i) {
                        if (a.sizes[i] == 1) continue;
                        if (a.strides[i] != expect) return false;
                        expect = a.strides[i] * a.sizes[i];
                      }
                      return a.strides[a.ndim - 2] >= a.sizes[a.ndim - 1];
                    }();
  std::vector<float> sa, sb, so;
  const Mat mb0 = describe(b, b.offset, sb);
  if (fold) {
    const Mat ma{static_cast<const float*>(a.data) + a.offset, batch * m, a.sizes[a.ndim - 1],
                 a.strides[a.ndim - 2], false};
    product(ma, mb0, static_cast<float*>(out.data) + out.offset, n, ctx);
    return;
  }
  std::int64_t astr[1][kMaxDims] = {}, bstr[1][kMaxDims] = {};
  std::int64_t batch_sizes[kMaxDims] = {};
  for (int i = 0; i < nd - 2; ++i) batch_sizes[i] = out.sizes[i];
  {
    // Batch strides of a and b aligned to out's batch dims (0 where broadcast).
    TensorArg ab = a, bb = b;
    ab.ndim = a.ndim - 2;
    bb.ndim = std::max(0, b.ndim - 2);
    broadcast_strides(ab, nd - 2, batch_sizes, astr[0]);
    broadcast_strides(bb, nd - 2, batch_sizes, bstr[0]);
  }
  std::int64_t index[kMaxDims] = {};
  for (std::int64_t i = 0; i < batch; ++i) {
    std::int64_t ao = a.offset, bo = b.offset, oo = out.offset;
    for (int d = 0; d < nd - 2; ++d) {
      ao += index[d] * astr[0][d];
      bo += index[d] * bstr[0][d];
      oo += index[d] * out.strides[d];
    }
    const Mat ma = describe(a, ao, sa);
    const Mat mb = b.ndim == 2 ? mb0 : describe(b, bo, sb);
    const bool direct = out.dtype == DType::f32 && out.strides[nd - 1] == 1;
    if (direct) {
      product(ma, mb, static_cast<float*>(out.data) + oo, out.strides[nd - 2], ctx);
    } else {
      so.assign(static_cast<std::size_t>(m * n), 0.0F);
      product(ma, mb, so.data(), n, ctx);
      dispatch_float(out.dtype, [&]<typename T>() {
        T* po = static_cast<T*>(out.data) + oo;
        for (std::int64_t r = 0; r < m; ++r) {
          for (std::int64_t c = 0; c < n; ++c) {
            store(po + r * out.strides[nd - 2] + c * out.strides[nd - 1],
                  so[static_cast<std::size_t>(r * n + c)]);
          }
        }
      });
    }
    for (int d = nd - 3; d >= 0; --d) {
      if (++index[d] < out.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void matmul(const ArgBlock& args, KernelContext& ctx) {
  batched(args.tensors[0], args.tensors[1], args.tensors[2], ctx);
}

namespace {

// Note [Rows of a linear]
// out[i, r] = w[r, :] . x[i, :] for f32 rows (Note [Vectorized inner
// loops]), for one row of x (decode) or a few (a batch of decode steps, a
// short prompt). A weight that fits in cache is compute-bound: four weight
// rows per pass over x, each summed in lanes, beat a BLAS call, whose fixed
// cost dominates there. A large one (kStreamedWeightBytes, Note [Streamed
// weights]) streams from memory, and there one row at a time was measured
// faster than both the four-row walk and OpenBLAS's sgemv (32000 x 512:
// 7.0-8.2 ms against 9.0-9.5 and 8.8-9.2 ms): a single sequential stream is
// what the hardware prefetcher follows best. Four or more rows of x (a
// batch) are compute-bound again, and take four weight rows at a time
// (dot_rows_block4, whose sums are dot_rows').
//
// Each weight row (or block of four) is read once for all of x's rows while
// it sits in L1, and the parts split across the compute threads are weight
// rows, never the sum. Every output element is the same dot_rows() or
// dot4_rows() sum of its row whatever the number of rows, so a row's result
// is bitwise the same alone or among others, at any thread count (batch
// invariance: batched decoding must give each sequence the ids it gets
// alone).
void linear_rows_f32(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx, float* out,
                     std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
                     KernelContext& ctx) {
  // Rows of x taken R at a time; `fn(R, xs, os)` runs the block with the
  // pointers of rows i .. i+R-1 of x and of out at column r.
  const auto by_rows = [&](std::int64_t r, auto&& fn) {
    std::int64_t i = 0;
    const auto block = [&]<int R>() {
      const float* xs[R];
      float* os[R];
      for (int j = 0; j < R; ++j) {
        xs[j] = x + (i + j) * ldx;
        os[j] = out + (i + j) * ldo + r;
      }
      fn.template operator()<R>(xs, os);
      i += R;
    };
    while (i + 4 <= m) block.template operator()<4>();
    if (i + 2 <= m) block.template operator()<2>();
    if (i < m) block.template operator()<1>();
  };
  if (n * k * static_cast<std::int64_t>(sizeof(float)) > kStreamedWeightBytes) {
    parallel_for(ctx, n, grain_for(m * k), [&](std::int64_t begin, std::int64_t end) {
      std::int64_t r = begin;
      if (m >= 4) {  // a batch: four weight rows at a time, the same sums
        for (; r + 4 <= end; r += 4) {
          bool first = true;  // Note [Prefetching the next weight rows] in vec.h
          by_rows(r, [&]<int R>(const float* const* xs, float* const* os) {
            if (first) {
              vec::dot_rows_block4<R, true>(w + r * ldw, ldw, xs, k, os);
            } else {
              vec::dot_rows_block4<R>(w + r * ldw, ldw, xs, k, os);
            }
            first = false;
          });
        }
      }
      for (; r < end; ++r) {
        by_rows(r, [&]<int R>(const float* const* xs, float* const* os) {
          vec::dot_rows<R, true>(w + r * ldw, xs, k, os);
        });
      }
    });
    return;
  }
  constexpr std::int64_t kRows = 4;
  const std::int64_t blocks = (n + kRows - 1) / kRows;
  parallel_for(ctx, blocks, grain_for(kRows * m * k), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t r = b * kRows;
      if (r + kRows > n) {
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = r; j < n; ++j)
            out[i * ldo + j] = vec::dot(w + j * ldw, x + i * ldx, k);
        }
        continue;
      }
      by_rows(r, [&]<int R>(const float* const* xs, float* const* os) {
        vec::dot4_rows<R>(w + r * ldw, ldw, xs, k, os);
      });
    }
  });
}

// Note [Products of many rows]
// A prefill's products (more than kMaxKernelRows rows of x) are compute
// bound, and there the dot-product walk of linear_rows_f32 (Note [Rows of a
// linear]) reaches about half of what OpenBLAS's sgemm does on one thread
// (bench_linear: 23-30 against 55-74 GFLOP/s), because every multiply-add
// loads both of its operands and each sum ends in a lane reduction. OpenBLAS
// cannot run on several compute threads at once (Note [OpenBLAS is not
// reentrant]), so these products run a register-blocked kernel of our own,
// split across the compute threads by blocks of kTileCols output columns
// (weight rows). A part packs its block's weight rows transposed, 16
// columns by up to kTileDepth of K, on its stack, then walks x kTileRows
// rows at a time:
// for each k, two vectors of the packed block and six broadcasts of x feed
// twelve multiply-adds into twelve accumulators that stay in registers.
// Each output is one sequential multiply-add chain over k, whatever the
// rows, columns or thread count around it (a later block of K resumes the
// chain from out), so a row's result is the same among any other rows past
// kMaxKernelRows, and at any thread count; it differs from linear_rows_f32's
// lane sums (a row alone) by rounding only. A matmul's row-major b[K, N]
// packs the same way, reading 16 contiguous floats per k, and runs this
// kernel at any number of rows (product()).
// In a build with oneDNN, tiles_f32 asks its matmul first (Note [Matrix
// products through oneDNN] in onednn.h), which measured 2.5x this kernel's
// rate on one thread (AVX-512 brgemm against our 8-lane tiles); these tiles
// run the products it declines, every product with set_use_onednn(false),
// and linear's products where oneDNN's kernels are AVX2's, whose rows do not
// keep one order of sums (onednn::rows_in_any_order(), onednn.h).

// out[i, 0..cols) for R rows of x over k in [0, kc), with the block's kTileCols
// weights for each k at packed[c * ldp], continuing the sums already in out
// when `resume` (a later block of k: storing a float and loading it back is
// exact, so the chain is unbroken).
template <int R>
void tile_rows(const float* packed, std::int64_t ldp, const float* x, std::int64_t ldx,
               std::int64_t kc, float* out, std::int64_t ldo, std::int64_t cols, bool resume) {
  vec::F8 acc[R][2] = {};
  if (resume) {
    for (int i = 0; i < R; ++i) {
      float row[kTileCols] = {};
      std::copy(out + i * ldo, out + i * ldo + cols, row);
      std::memcpy(&acc[i][0], row, sizeof acc[i][0]);
      std::memcpy(&acc[i][1], row + vec::kLanes, sizeof acc[i][1]);
    }
  }
  for (std::int64_t c = 0; c < kc; ++c) {
    vec::F8 b0, b1;
    std::memcpy(&b0, packed + c * ldp, sizeof b0);
    std::memcpy(&b1, packed + c * ldp + vec::kLanes, sizeof b1);
    for (int i = 0; i < R; ++i) {
      const vec::F8 a = vec::splat(x[i * ldx + c]);
      acc[i][0] = vec::fmadd(a, b0, acc[i][0]);  // Note [Explicit fma] in vec.h
      acc[i][1] = vec::fmadd(a, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float row[kTileCols];
    std::memcpy(row, &acc[i][0], sizeof acc[i][0]);
    std::memcpy(row + vec::kLanes, &acc[i][1], sizeof acc[i][1]);
    std::copy(row, row + cols, out + i * ldo);
  }
}

// Packs columns [r0, r0 + cols) by k in [k0, k0 + kc) of a weight whose
// element (n, k) is w[n * wn + k * wk] into packed[c * kTileCols + j],
// zeros past `cols`.
void pack_block(const float* w, std::int64_t wn, std::int64_t wk, std::int64_t r0,
                std::int64_t cols, std::int64_t k0, std::int64_t kc, float* packed) {
  if (wk == 1) {  // a linear's w[N, K]: each column is a row of w
    for (std::int64_t j = 0; j < cols; ++j) {
      const float* wr = w + (r0 + j) * wn + k0;
      for (std::int64_t c = 0; c < kc; ++c) packed[c * kTileCols + j] = wr[c];
    }
  } else {  // a matmul's b[K, N]: each k is a row of b
    for (std::int64_t c = 0; c < kc; ++c) {
      const float* src = w + (k0 + c) * wk + r0 * wn;
      for (std::int64_t j = 0; j < cols; ++j) packed[c * kTileCols + j] = src[j * wn];
    }
  }
  for (std::int64_t j = cols; j < kTileCols; ++j) {
    for (std::int64_t c = 0; c < kc; ++c) packed[c * kTileCols + j] = 0.0F;
  }
}

// Blocks [begin, end) of kTileCols columns: out[M, cols] for every row of x.
void tile_part(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
               float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
               std::int64_t begin, std::int64_t end) {
  alignas(64) float packed[kTileDepth * kTileCols];  // 32 KiB: L1
  for (std::int64_t b = begin; b < end; ++b) {
    const std::int64_t r0 = b * kTileCols, cols = std::min(kTileCols, n - r0);
    // A row-major b[K, N] already holds a whole block's kTileCols weights for
    // each k contiguously: with no more rows than one tile, the packed copy
    // would be read once, so the tile reads b in place (the same chains, so
    // the same bits).
    const bool in_place = wn == 1 && cols == kTileCols && m <= kTileRows;
    for (std::int64_t k0 = 0; k0 < k; k0 += kTileDepth) {
      const std::int64_t kc = std::min(kTileDepth, k - k0);
      const float* block = w + k0 * wk + r0 * wn;
      std::int64_t ldp = wk;
      if (!in_place) {
        pack_block(w, wn, wk, r0, cols, k0, kc, packed);
        block = packed;
        ldp = kTileCols;
      }
      std::int64_t i = 0;
      const auto tile = [&]<int R>() {
        tile_rows<R>(block, ldp, x + i * ldx + k0, ldx, kc, out + i * ldo + r0, ldo, cols, k0 > 0);
        i += R;
      };
      while (i + kTileRows <= m) tile.template operator()<kTileRows>();
      if (m - i >= 4) tile.template operator()<4>();  // fewer than kTileRows left
      if (m - i >= 2) tile.template operator()<2>();
      if (m - i >= 1) tile.template operator()<1>();
      SG_ASSERT(i == m, "tile_part left rows of x");
    }
  }
}

// out[M, N] = x[M, K] @ W for a weight whose element (n, k) is
// w[n * wn + k * wk]: a linear's w[N, K] (wn = ldw, wk = 1) or a matmul's
// row-major b[K, N] (wn = 1, wk = ldb).
// `any_order`: each row's bits must not depend on its place among the rows
// (linear's promise), which oneDNN keeps only with AVX-512 kernels.
void tiles_f32(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
               float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
               KernelContext& ctx, bool any_order) {
  // Note [Matrix products through oneDNN] (onednn.h): where this build has it.
  if ((!any_order || onednn::rows_in_any_order()) &&
      onednn::matmul(w, wn, wk, x, ldx, out, ldo, m, n, k, ctx)) {
    return;
  }
  const std::int64_t blocks = (n + kTileCols - 1) / kTileCols;
  parallel_for(ctx, blocks, grain_for(m * k * kTileCols),
               [&](std::int64_t begin, std::int64_t end) {
                 tile_part(w, wn, wk, x, ldx, out, ldo, m, n, k, begin, end);
               });
}

void linear_tiles_f32(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx,
                      float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
                      KernelContext& ctx) {
  tiles_f32(w, ldw, 1, x, ldx, out, ldo, m, n, k, ctx, /*any_order=*/true);
}

// Rows of x up to this many run linear_rows_f32; more (a prefill) run
// linear_tiles_f32, whose register blocking wins there.
constexpr std::int64_t kMaxKernelRows = 32;

void linear_f32(const float* w, std::int64_t ldw, const float* x, std::int64_t ldx, float* out,
                std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
                KernelContext& ctx) {
  (m <= kMaxKernelRows ? linear_rows_f32 : linear_tiles_f32)(w, ldw, x, ldx, out, ldo, m, n, k,
                                                             ctx);
}

// The uniform stride between the rows of `t` over its last dimension (its
// leading dimensions folded into one), or -1 when they do not fold.
std::int64_t folded_row_stride(const TensorArg& t) {
  std::int64_t stride = -1, expect = -1;
  for (int d = t.ndim - 2; d >= 0; --d) {
    if (t.sizes[d] == 1) continue;
    if (stride < 0) {
      stride = t.strides[d];
      expect = stride * t.sizes[d];
    } else if (t.strides[d] == expect) {
      expect *= t.sizes[d];
    } else {
      return -1;
    }
  }
  return stride < 0 ? 0 : stride;
}

}  // namespace

void linear(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& w = args.tensors[1];
  const TensorArg& out = args.tensors[2];
  const std::int64_t k = w.sizes[1], n = w.sizes[0];
  const std::int64_t m = k > 0 ? x.numel() / k : 0;
  if (x.dtype == DType::f32 && w.dtype == DType::f32 && out.dtype == DType::f32 && k > 0 &&
      m >= 1 && x.strides[x.ndim - 1] == 1 && w.strides[1] == 1 && w.strides[0] >= k &&
      out.strides[out.ndim - 1] == 1) {
    const std::int64_t ldx = folded_row_stride(x), ldo = folded_row_stride(out);
    if (ldx >= 0 && ldo >= 0) {
      linear_f32(w.ptr<float>(), w.strides[0], x.ptr<float>(), ldx, out.ptr<float>(), ldo, m, n, k,
                 ctx);
      return;
    }
  }
  TensorArg wt = args.tensors[1];  // w[N, K] seen as w^T[K, N]: swap the dims
  std::swap(wt.sizes[0], wt.sizes[1]);
  std::swap(wt.strides[0], wt.strides[1]);
  batched(args.tensors[0], wt, args.tensors[2], ctx);
}

}  // namespace sinkgraph::kernels::cpu
