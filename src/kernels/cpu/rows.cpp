// Operations over the last dimension: softmax, rms_norm, layer_norm, argmax, sample,
// count_nonfinite.
#include "rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../counter_rng.h"
#include "common.h"
#include "kernels.h"

namespace sinkgraph::kernels::cpu {

namespace {
inline std::int64_t last_stride(const TensorArg& t) {
  return t.ndim > 0 ? t.strides[t.ndim - 1] : 1;
}
inline std::int64_t last_size(const TensorArg& t) { return t.ndim > 0 ? t.sizes[t.ndim - 1] : 1; }
// An output of rank x.ndim - 1 (one value per row of x), given a trailing
// size-1 dim so for_each_last_dim_row can walk it beside x.
inline TensorArg one_per_row(const TensorArg& o, const TensorArg& x) {
  TensorArg orow = o;
  orow.ndim = x.ndim;
  if (x.ndim > 0) {
    orow.sizes[x.ndim - 1] = 1;
    orow.strides[x.ndim - 1] = 1;
  }
  return orow;
}
// Rows of f32 with unit stride: the vectorized row functions (rows.h) apply.
inline bool unit_f32_rows(const TensorArg& t) {
  return t.dtype == DType::f32 && last_stride(t) == 1;
}
}  // namespace

void softmax(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const std::int64_t os = last_stride(o);
  if (unit_f32_rows(x) && unit_f32_rows(o)) {
    const auto* px = static_cast<const float*>(x.data);
    auto* po = static_cast<float*>(o.data);
    parallel_last_dim_rows(ctx, x, o, n, [&](std::int64_t xo, std::int64_t oo) {
      softmax_row_f32(px + xo, po + oo, n);
    });
    return;
  }
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    T* po = static_cast<T*>(o.data);
    parallel_last_dim_rows(ctx, x, o, n, [&](std::int64_t xo, std::int64_t oo) {
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, load(px + xo + i * xs));
      float sum = 0.0F;
      for (std::int64_t i = 0; i < n; ++i) {
        const float e = std::exp(load(px + xo + i * xs) - mx);
        store(po + oo + i * os, e);
        sum += e;
      }
      const float inv = 1.0F / sum;
      for (std::int64_t i = 0; i < n; ++i) {
        // Re-read the exponentials from x for f16/bf16 so rounding happens once.
        const float e = std::exp(load(px + xo + i * xs) - mx);
        store(po + oo + i * os, e * inv);
      }
    });
  });
}

void rms_norm(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& w = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  const auto eps = static_cast<float>(args.scalars[0].f);
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const std::int64_t ws = last_stride(w);
  const std::int64_t os = last_stride(o);
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    const T* pw = static_cast<const T*>(w.data) + w.offset;
    T* po = static_cast<T*>(o.data);
    parallel_last_dim_rows(ctx, x, o, n, [&](std::int64_t xo, std::int64_t oo) {
      rms_norm_row(px + xo, xs, pw, ws, po + oo, os, n, eps);
    });
  });
}

void layer_norm(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& w = args.tensors[1];
  const TensorArg& b = args.tensors[2];
  const TensorArg& o = args.tensors[3];
  const auto eps = static_cast<float>(args.scalars[0].f);
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const std::int64_t ws = last_stride(w);
  const std::int64_t bs = last_stride(b);
  const std::int64_t os = last_stride(o);
  // f32 rows with adjacent values are normalized in place; strided ones are
  // gathered first (below).
  //
  // Note [A layer norm over channels]
  // A channels-first activation normalized over its channels (ConvNeXt's
  // permute(0, 2, 3, 1) before each LayerNorm) has its rows strided by H * W
  // and adjacent rows side by side. Each row is gathered into a buffer and
  // normalized by the same row function as a dense row: the same value,
  // bitwise, for the same numbers in any layout, at the speed of the lanes.
  // The loads of one row touch n cache lines, which the next rows (the next
  // positions) read again from L1/L2. The scalar strided loop below took 3x
  // torch's time on ConvNeXt's layers; gathered, layer_norm went from 6.9% to
  // 3.9% of its profile (docs/performance.md, "Batch norms folded per call").
  if (x.dtype == DType::f32 && unit_f32_rows(o) && unit_f32_rows(w) && unit_f32_rows(b)) {
    const auto* px = static_cast<const float*>(x.data);
    const float* pw = static_cast<const float*>(w.data) + w.offset;
    const float* pb = static_cast<const float*>(b.data) + b.offset;
    auto* po = static_cast<float*>(o.data);
    parallel_last_dim_rows(ctx, x, o, n, [&](std::int64_t xo, std::int64_t oo) {
      if (xs == 1) {
        layer_norm_row_f32(px + xo, pw, pb, po + oo, n, eps);
        return;
      }
      thread_local std::vector<float> row;
      if (row.size() < static_cast<std::size_t>(n)) row.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) row[i] = px[xo + i * xs];
      layer_norm_row_f32(row.data(), pw, pb, po + oo, n, eps);
    });
    return;
  }
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    const T* pw = static_cast<const T*>(w.data) + w.offset;
    const T* pb = static_cast<const T*>(b.data) + b.offset;
    T* po = static_cast<T*>(o.data);
    parallel_last_dim_rows(ctx, x, o, n, [&](std::int64_t xo, std::int64_t oo) {
      float mean = 0.0F;
      for (std::int64_t i = 0; i < n; ++i) mean += load(px + xo + i * xs);
      mean /= static_cast<float>(n);
      float var = 0.0F;
      for (std::int64_t i = 0; i < n; ++i) {
        const float d = load(px + xo + i * xs) - mean;
        var += d * d;
      }
      const float inv = 1.0F / std::sqrt(var / static_cast<float>(n) + eps);
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = (load(px + xo + i * xs) - mean) * inv;
        store(po + oo + i * os, v * load(pw + i * ws) + load(pb + i * bs));
      }
    });
  });
}

namespace {
template <typename V>
bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return std::isnan(v);
  } else {
    return false;
  }
}
}  // namespace

// The first index of the largest value; NaN never wins, except as element 0
// (nothing compares greater than it). A single long row (the decode step's
// logits) is scanned in fixed blocks across the compute threads, each block
// finding its own first maximum, then merged in order keeping the earlier
// index on ties: the same index as one scan, at any thread count.
void argmax(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const TensorArg orow = one_per_row(o, x);
  dispatch_all(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    auto* po = static_cast<std::int64_t*>(o.data);
    // First maximum of elements [begin, end) of the row at xo, a NaN being
    // above everything: torch.argmax gives the first NaN's index (a row of
    // logits with a NaN is never silently read as its largest number); -1
    // for an empty range (the last blocks of a split row may have none).
    const auto scan = [&](std::int64_t xo, std::int64_t begin, std::int64_t end) {
      if (begin >= end) return std::int64_t{-1};
      std::int64_t best = begin;
      compute_t<T> best_v = load(px + xo + begin * xs);
      if (is_nan(best_v)) return best;
      for (std::int64_t i = begin + 1; i < end; ++i) {
        const auto v = load(px + xo + i * xs);
        if (is_nan(v)) return i;
        if (v > best_v) {
          best_v = v;
          best = i;
        }
      }
      return best;
    };
    constexpr std::int64_t kBlock = 8192;
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
    if (x.numel() == n && blocks > 1) {
      std::int64_t found[64];  // per block; rows this long split at most 64 ways
      const std::int64_t used = std::min<std::int64_t>(blocks, 64);
      const std::int64_t per = (blocks + used - 1) / used * kBlock;
      parallel_for(ctx, used, grain_for(per), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t b = begin; b < end; ++b)
          found[b] = scan(x.offset, b * per, std::min(n, (b + 1) * per));
      });
      // Blocks in order: the first block's NaN is the row's first NaN.
      std::int64_t best = found[0];
      for (std::int64_t b = 1; b < used && !is_nan(load(px + x.offset + best * xs)); ++b) {
        if (found[b] < 0) continue;
        const auto v = load(px + x.offset + found[b] * xs);
        if (is_nan(v) || v > load(px + x.offset + best * xs)) best = found[b];
      }
      po[o.offset] = best;
      return;
    }
    for_each_last_dim_row(x, orow,
                          [&](std::int64_t xo, std::int64_t oo) { po[oo] = scan(xo, 0, n); });
  });
}

// Note [Counter-based sampling]: row r draws u = counter_uniform(seed,
// offset, r) and picks the first index whose running sum of
// exp((x_i - max) / T), in double, exceeds u times the total (inverse CDF).
// Two passes recompute each exponential instead of storing it: a kernel has
// no scratch memory, and exp is deterministic, so both passes see the same
// values.
//
// The sums run in fixed blocks of the row (kSampleBlock elements, at most
// kMaxSampleBlocks of them): each block's sum in order from zero, the total
// the blocks' sums in order, and the pick the first block whose sum exceeds
// what is left of the target, then the first index inside it. Blocks depend
// only on the row's length, so a row samples the same index whatever the
// thread count and whatever other rows share the call; a single long row
// (the decode step's logits) splits its blocks across the compute threads.
void sample(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const double temperature = args.scalars[0].f;
  const auto seed = static_cast<std::uint64_t>(args.scalars[1].i);
  const auto offset = static_cast<std::uint64_t>(args.scalars[2].i);
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const TensorArg orow = one_per_row(o, x);
  constexpr std::int64_t kSampleBlock = 8192;
  constexpr std::int64_t kMaxSampleBlocks = 64;
  const std::int64_t blocks =
      std::min(kMaxSampleBlocks, std::max<std::int64_t>(1, (n + kSampleBlock - 1) / kSampleBlock));
  const std::int64_t per = ((n + kSampleBlock - 1) / kSampleBlock + blocks - 1) / blocks *
                           kSampleBlock;  // elements per block
  const bool split = x.numel() == n && blocks > 1;
  std::uint64_t row = 0;
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    auto* po = static_cast<std::int64_t*>(o.data);
    for_each_last_dim_row(x, orow, [&](std::int64_t xo, std::int64_t oo) {
      const auto value = [&](std::int64_t i) { return double{load(px + xo + i * xs)}; };
      // Blocks [begin, end) of the row, on the compute threads when it is
      // the only row.
      const auto each_block = [&](auto&& fn) {
        const auto run = [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t b = begin; b < end; ++b) fn(b, b * per, std::min(n, (b + 1) * per));
        };
        if (split) {
          parallel_for(ctx, blocks, grain_for(per), run);
        } else {
          run(0, blocks);
        }
      };
      // The largest value, NaN skipped unless it is element 0 (as argmax).
      double block_max[kMaxSampleBlocks];
      each_block([&](std::int64_t b, std::int64_t begin, std::int64_t end) {
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t i = begin; i < end; ++i) m = std::max(m, value(i));
        block_max[b] = m;
      });
      double best = value(0);
      for (std::int64_t b = 0; b < blocks; ++b) best = std::max(best, block_max[b]);
      const auto weight = [&](std::int64_t i) { return std::exp((value(i) - best) / temperature); };
      double block_sum[kMaxSampleBlocks];
      each_block([&](std::int64_t b, std::int64_t begin, std::int64_t end) {
        double sum = 0;
        for (std::int64_t i = begin; i < end; ++i) sum += weight(i);
        block_sum[b] = sum;
      });
      double total = 0;
      for (std::int64_t b = 0; b < blocks; ++b) total += block_sum[b];
      const double target = counter_uniform(seed, offset, row++) * total;
      // The first block holding the target; within it, the first index
      // with a positive weight whose running sum (from zero, as the block's
      // sum was taken) passes it. Rounding may leave the target at or past
      // the total: then the last index with a positive weight. A NaN total
      // picks 0.
      std::int64_t pick = 0;
      std::int64_t last_positive_block = -1;
      bool found = false;
      double before = 0;  // the sums of the blocks before b
      for (std::int64_t b = 0; b < blocks && !found; ++b) {
        const std::int64_t begin = b * per, end = std::min(n, (b + 1) * per);
        if (target - before < block_sum[b]) {
          double acc = 0;
          for (std::int64_t i = begin; i < end && !found; ++i) {
            const double w = weight(i);
            acc += w;
            found = w > 0 && target - before < acc;
            if (found) pick = i;
          }
        }
        if (block_sum[b] > 0) last_positive_block = b;
        before += block_sum[b];
      }
      if (!found && last_positive_block >= 0) {
        for (std::int64_t i = last_positive_block * per,
                          end = std::min(n, (last_positive_block + 1) * per);
             i < end; ++i) {
          if (weight(i) > 0) pick = i;
        }
      }
      po[oo] = pick;
    });
  });
}

// Per row, the values that are NaN or infinite: those for which |v| <= max
// is false. Unlike std::isfinite the comparison vectorizes, so a decode
// step's check of its logits costs a pass over one row in SIMD.
void count_nonfinite(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const std::int64_t n = last_size(x);
  const std::int64_t xs = last_stride(x);
  const TensorArg orow = one_per_row(o, x);
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    auto* po = static_cast<std::int64_t*>(o.data);
    using C = compute_t<T>;
    constexpr C kMax = std::numeric_limits<C>::max();
    parallel_last_dim_rows(ctx, x, orow, n, [&](std::int64_t xo, std::int64_t oo) {
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < n; ++i) bad += !(std::abs(load(px + xo + i * xs)) <= kMax);
      po[oo] = bad;
    });
  });
}

}  // namespace sinkgraph::kernels::cpu
