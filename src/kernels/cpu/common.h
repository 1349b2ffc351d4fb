#pragma once
// Helpers shared by the CPU kernels: typed loads and stores (f16/bf16 convert
// through f32), dtype dispatch, strided iteration and intra-op parallelism.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"
#include "sinkgraph/kernel_abi.h"

namespace sinkgraph::kernels {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type arithmetic is done in: f32 for every floating format, the native
// type for integers.
template <typename T>
using compute_t = std::conditional_t<std::is_integral_v<T>, T, float>;

template <typename T>
inline compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, Half>) {
    return f16_to_f32(p->bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16_to_f32(p->bits);
  } else {
    return *p;
  }
}

template <typename T, typename V>
inline void store(T* p, V v) {
  if constexpr (std::is_same_v<T, Half>) {
    p->bits = f32_to_f16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    p->bits = f32_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    *p = v != V{};
  } else {
    *p = static_cast<T>(v);
  }
}

// Calls fn.template operator()<T>() with the storage type of `dtype`.
template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f16:
      return fn.template operator()<Half>();
    case DType::bf16:
      return fn.template operator()<BFloat16>();
    default:
      SG_ASSERT(false, "dispatch_float: ", dtype_name(dtype), " is not a floating dtype");
  }
}

template <typename Fn>
void dispatch_all(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::i32:
      return fn.template operator()<std::int32_t>();
    case DType::i64:
      return fn.template operator()<std::int64_t>();
    case DType::boolean:
      return fn.template operator()<bool>();
    case DType::u8:
      return fn.template operator()<std::uint8_t>();
    default:
      return dispatch_float(dtype, std::forward<Fn>(fn));
  }
}

// Strides of `t` broadcast against an output of rank `ndim` and sizes `sizes`:
// missing leading dims and size-1 dims get stride 0.
inline void broadcast_strides(const TensorArg& t, int ndim, const std::int64_t* sizes,
                              std::int64_t* out) {
  for (int i = 0; i < ndim; ++i) {
    const int j = t.ndim - ndim + i;
    out[i] = (j < 0 || (t.sizes[j] == 1 && sizes[i] != 1)) ? 0 : t.strides[j];
  }
}

// Visits every index of `sizes` (rank ndim) with N operands, calling
// fn(offsets[N], inner_count, inner_strides[N]) once per innermost row.
template <int N, typename Fn>
void for_each_row(int ndim, const std::int64_t* sizes, const std::int64_t (&strides)[N][kMaxDims],
                  const std::int64_t (&base)[N], Fn&& fn) {
  std::int64_t total = 1;
  for (int i = 0; i < ndim; ++i) total *= sizes[i];
  if (total == 0) return;
  if (ndim == 0) {
    const std::int64_t ones[N] = {};
    fn(base, std::int64_t{1}, ones);
    return;
  }
  std::int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = strides[k][ndim - 1];
  std::int64_t index[kMaxDims] = {};
  std::int64_t offsets[N];
  for (int k = 0; k < N; ++k) offsets[k] = base[k];
  const std::int64_t rows = total / sizes[ndim - 1];
  for (std::int64_t r = 0; r < rows; ++r) {
    fn(offsets, sizes[ndim - 1], inner);
    for (int d = ndim - 2; d >= 0; --d) {  // odometer over the outer dims
      ++index[d];
      for (int k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < sizes[d]) break;
      for (int k = 0; k < N; ++k) offsets[k] -= strides[k][d] * sizes[d];
      index[d] = 0;
    }
  }
}

// Note [Splitting a kernel's work]
// parallel_for(ctx, n, grain, fn) calls fn(begin, end) over [0, n) cut into
// parts, one per compute thread (Note [Compute threads]), and returns when
// all are done. The cut is static: parts are whole multiples of `grain`
// (the last one excepted) and depend only on n, grain and the thread count,
// and a kernel computes each index by the same code whichever part holds it,
// so its result does not depend on the thread count. `grain` is also the
// work threshold: no part is smaller, so a kernel sets it from its work per
// index (grain_for()) and a small one runs on the calling thread alone,
// paying no handoff. Nothing here allocates.
//
// Elements a part must touch before handing it to another thread pays.
// Measured with bench_split (docs/performance.md, "Steady numbers"): a split
// across two threads adds about 1.9 us per kernel, and a part of this many
// elements takes that long in the cheapest kernel per element, a
// matrix-vector product from cache (which breaks even here, while an add
// gains 1.35x); half this, the product would lose, twice this, the add would
// forgo its gain.
inline constexpr std::int64_t kMinParallelWork = std::int64_t{1} << 15;

// Note [Streamed weights]
// A decode step reads each weight once, so a weight is in cache only when
// the whole model fits there; a weight this large is taken to stream from
// memory. Streamed, one row at a time (one sequential stream) beats four
// rows side by side (four streams): a 512 KiB weight (256 x 512, cycling
// through 200 MB of copies, one thread) read at 16.9 GB/s one row at a time
// against 9.8 four at a time; in cache the four-row walk was ~15% faster
// (55.6 against 64 GB/s). A tensor-parallel rank's slices of the dim-512
// model's attention weights are 512 KiB each: with the earlier 1 MiB
// threshold they took the four-row walk from memory (docs/performance.md,
// "Tensor parallelism"). linear's kernel (Note [Rows
// of a linear]) and max-autotune's generated linear (which declines larger
// weights) both use it.
inline constexpr std::int64_t kStreamedWeightBytes = std::int64_t{256} << 10;

// The grain for indices that each touch `work` elements.
inline std::int64_t grain_for(std::int64_t work) {
  return std::max<std::int64_t>(1, kMinParallelWork / std::max<std::int64_t>(work, 1));
}

template <typename Fn>
void parallel_for(KernelContext& ctx, std::int64_t n, std::int64_t grain, Fn&& fn) {
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t wanted = std::min<std::int64_t>(ctx.num_threads(), n / grain);
  if (wanted <= 1) {
    fn(std::int64_t{0}, n);
    return;
  }
  std::int64_t step = (n + wanted - 1) / wanted;
  step = (step + grain - 1) / grain * grain;
  struct Job {
    std::remove_reference_t<Fn>* fn;
    std::int64_t n, step;
  } job{&fn, n, step};
  ctx.parallel_run(
      static_cast<int>((n + step - 1) / step),
      [](void* arg, int part) {
        const Job& j = *static_cast<const Job*>(arg);
        const std::int64_t begin = part * j.step;
        (*j.fn)(begin, std::min(j.n, begin + j.step));
      },
      &job);
}

// Note [Coalesced rows]
// for_each_row hands a kernel one innermost row at a time, and the kernel's
// loop vectorizes only over a row whose strides are 1 (or 0, a broadcast
// value). A squeeze-and-excitation scale [N, C, 1, 1] times an [N, C, H, W]
// activation walks rows of W elements with the scale at stride 0, element by
// element through the strided loop on one thread: efficientnet_b0's `mul`
// took 4x torch's time (docs/performance.md, "Broadcasts over rows"). Two
// adjacent dims are one when every operand's stride over the outer equals its
// stride over the inner times the inner's size, and size-1 dims are no dims
// at all; merged, that product is C rows of H * W elements, each a
// contiguous loop against one value. Every element is still the same op on
// the same values, so the result is the same bits in any order and on any
// number of threads.

// Merges the dims of `sizes` (rank ndim) as above, in place, for N operands'
// strides; returns the new rank (0 when every dim had size 1).
template <int N>
int coalesce_dims(int ndim, std::int64_t* sizes, std::int64_t (&strides)[N][kMaxDims]) {
  int out = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    bool joins = out > 0;
    for (int k = 0; k < N && joins; ++k) joins = strides[k][out - 1] == strides[k][d] * sizes[d];
    if (joins) {
      sizes[out - 1] *= sizes[d];
      for (int k = 0; k < N; ++k) strides[k][out - 1] = strides[k][d];
      continue;
    }
    sizes[out] = sizes[d];
    for (int k = 0; k < N; ++k) strides[k][out] = strides[k][d];
    ++out;
  }
  return out;
}

// for_each_row over the coalesced dims (Note [Coalesced rows]), the rows split
// across the compute threads by parallel_for, each row's work its length. For
// kernels whose value per element does not depend on which row or thread
// computes it.
template <int N, typename Fn>
void parallel_rows(KernelContext& ctx, int ndim, const std::int64_t* in_sizes,
                   const std::int64_t (&in_strides)[N][kMaxDims], const std::int64_t (&base)[N],
                   Fn&& fn) {
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[N][kMaxDims];
  std::int64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    sizes[d] = in_sizes[d];
    total *= sizes[d];
    for (int k = 0; k < N; ++k) strides[k][d] = in_strides[k][d];
  }
  if (total == 0) return;
  const int nd = coalesce_dims<N>(ndim, sizes, strides);
  if (nd == 0) {
    const std::int64_t zeros[N] = {};
    fn(base, std::int64_t{1}, zeros);
    return;
  }
  const std::int64_t inner = sizes[nd - 1];
  std::int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
  parallel_for(ctx, total / inner, grain_for(inner), [&](std::int64_t begin, std::int64_t end) {
    std::int64_t index[kMaxDims] = {};
    std::int64_t offsets[N];
    for (int k = 0; k < N; ++k) offsets[k] = base[k];
    for (std::int64_t d = nd - 2, rest = begin; d >= 0; --d) {  // row `begin`'s outer index
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      for (int k = 0; k < N; ++k) offsets[k] += index[d] * strides[k][d];
    }
    for (std::int64_t r = begin; r < end; ++r) {
      fn(static_cast<const std::int64_t*>(offsets), inner,
         static_cast<const std::int64_t*>(inner_strides));
      for (int d = nd - 2; d >= 0; --d) {  // odometer over the outer dims
        ++index[d];
        for (int k = 0; k < N; ++k) offsets[k] += strides[k][d];
        if (index[d] < sizes[d]) break;
        for (int k = 0; k < N; ++k) offsets[k] -= strides[k][d] * sizes[d];
        index[d] = 0;
      }
    }
  });
}

// Logical rows over the last dimension of `t`: offset of each row's start.
template <typename Fn>
void for_each_last_dim_row(const TensorArg& in, const TensorArg& out, Fn&& fn) {
  const int nd = in.ndim;
  if (nd == 0) {
    fn(in.offset, out.offset);
    return;
  }
  std::int64_t strides[2][kMaxDims] = {};
  for (int i = 0; i < nd - 1; ++i) {
    strides[0][i] = in.strides[i];
    strides[1][i] = out.strides[i];
  }
  std::int64_t sizes[kMaxDims] = {};
  for (int i = 0; i < nd - 1; ++i) sizes[i] = in.sizes[i];
  sizes[nd - 1] = 1;  // one visit per row
  const std::int64_t base[2] = {in.offset, out.offset};
  for_each_row<2>(
      nd, sizes, strides, base,
      [&](const std::int64_t* off, std::int64_t, const std::int64_t*) { fn(off[0], off[1]); });
}

// for_each_last_dim_row split across the compute threads by rows, each row
// touching `work_per_row` elements (Note [Splitting a kernel's work]).
template <typename Fn>
void parallel_last_dim_rows(KernelContext& ctx, const TensorArg& in, const TensorArg& out,
                            std::int64_t work_per_row, Fn&& fn) {
  const int nd = in.ndim;
  std::int64_t rows = 1;
  for (int i = 0; i < nd - 1; ++i) rows *= in.sizes[i];
  if (nd <= 1 || rows < 2) {
    for_each_last_dim_row(in, out, fn);
    return;
  }
  parallel_for(ctx, rows, grain_for(work_per_row), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::int64_t in_offset = in.offset, out_offset = out.offset;
      for (std::int64_t d = nd - 2, f = r; d >= 0; --d) {
        const std::int64_t index = f % in.sizes[d];
        f /= in.sizes[d];
        in_offset += index * in.strides[d];
        out_offset += index * out.strides[d];
      }
      fn(in_offset, out_offset);
    }
  });
}

// An embedding's rows (embedding, embedding_q): fn(id, offset of its row in
// `out`) for each id of `ids` (i32 or i64, any strides) in order. An id
// outside [0, vocab) fails the kernel, naming it, its index and the table's
// size, and ends the walk.
template <typename Fn>
void for_each_embedding_row(KernelContext& ctx, const TensorArg& ids, const TensorArg& out,
                            std::int64_t vocab, Fn&& fn) {
  const std::int64_t n = ids.numel();
  for (std::int64_t k = 0; k < n; ++k) {
    // The flat index k over ids' shape: ids and output rows may be strided.
    std::int64_t id_off = ids.offset;
    std::int64_t out_off = out.offset;
    std::int64_t rem = k;
    for (int d = ids.ndim - 1; d >= 0; --d) {
      const std::int64_t idx = rem % ids.sizes[d];
      rem /= ids.sizes[d];
      id_off += idx * ids.strides[d];
      out_off += idx * out.strides[d];
    }
    const std::int64_t id = ids.dtype == DType::i32
                                ? static_cast<const std::int32_t*>(ids.data)[id_off]
                                : static_cast<const std::int64_t*>(ids.data)[id_off];
    if (id < 0 || id >= vocab) {
      ctx.fail("token id " + std::to_string(id) + " at index " + std::to_string(k) +
               " is out of range for an embedding table of " + std::to_string(vocab) +
               " rows (expected 0 <= id < " + std::to_string(vocab) + ")");
      return;
    }
    fn(id, out_off);
  }
}

}  // namespace sinkgraph::kernels
