// Transformer pieces: rotary embedding, embedding lookup, attention over a KV cache.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "kernels.h"
#include "onednn.h"
#include "rows.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu {

namespace {

// Rotates every head of one token's row (xr, out at orow, strides of x and o
// past dim 0) for position `pos`. As llama2.c: freq = 1 / theta^(2i / D), in
// f32. rope and rope_rows both call this, so a batched row is bitwise the
// row rotated alone.
template <typename T>
void rope_token(const T* xr, T* orow, const TensorArg& x, const TensorArg& o, float pos,
                float theta, bool half) {
  const std::int64_t heads = x.sizes[1], d = x.sizes[2];
  const std::int64_t pairs = d / 2;
  for (std::int64_t i = 0; i < pairs; ++i) {
    const float freq = 1.0F / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(d));
    const float angle = pos * freq;
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    const std::int64_t i0 = half ? i : 2 * i;
    const std::int64_t i1 = half ? i + pairs : 2 * i + 1;
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* xh = xr + h * x.strides[1];
      T* oh = orow + h * o.strides[1];
      const float a = load(xh + i0 * x.strides[2]);
      const float b = load(xh + i1 * x.strides[2]);
      store(oh + i0 * o.strides[2], a * c - b * s);
      store(oh + i1 * o.strides[2], a * s + b * c);
    }
  }
}

}  // namespace

void rope(const ArgBlock& args, KernelContext&) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const std::int64_t pos0 = args.scalars[0].i;
  const auto theta = static_cast<float>(args.scalars[1].f);
  const bool half = args.scalars[2].i == 1;
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data) + x.offset;
    T* po = static_cast<T*>(o.data) + o.offset;
    for (std::int64_t t = 0; t < x.sizes[0]; ++t) {
      rope_token(px + t * x.strides[0], po + t * o.strides[0], x, o, static_cast<float>(pos0 + t),
                 theta, half);
    }
  });
}

void embedding(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& w = args.tensors[0];
  const TensorArg& ids = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  const std::int64_t dim = w.sizes[1];
  const std::int64_t oc = o.strides[o.ndim - 1];
  dispatch_float(w.dtype, [&]<typename T>() {
    const T* pw = static_cast<const T*>(w.data) + w.offset;
    T* po = static_cast<T*>(o.data);
    for_each_embedding_row(ctx, ids, o, w.sizes[0], [&](std::int64_t id, std::int64_t row) {
      for (std::int64_t c = 0; c < dim; ++c) {
        po[row + c * oc] = pw[id * w.strides[0] + c * w.strides[1]];
      }
    });
  });
}

namespace {

// Note [Value rows in registers]
// A query row's output is sum_j p[j] * v_j over its keys in order. sdpa's
// row walk wrote it as a pass over the v rows that updated an accumulator
// row in memory: every key's multiply-adds read what the previous key's had
// just stored, one store-to-load chain per key, and a quarter of sdpa_rows'
// samples sat on that one store at decode's 8-wide heads. It now weighs the
// v rows as the decode attention does: eight columns at a time over all
// keys, the sums in registers (vec::weighted_sum_8cols: the even and the odd
// keys in two sets, added at the end), stored once. Per output element the
// order of the fused multiply-adds (Note [Explicit fma]) is fixed by the
// head size and the key count alone, so a row's result depends on nothing
// but its own operands: not on the rows beside it, the batch, or the thread
// count.

// out[0, d) = sum over j < keys of p[j] * v[j * vstride + (0, d)], f32, unit
// stride along d (Note [Value rows in registers]).
void weigh_values_f32(const float* p, std::int64_t keys, const float* v, std::int64_t vstride,
                      std::int64_t d, float* out) {
  std::int64_t c = 0;
  for (; c + vec::kLanes <= d; c += vec::kLanes) {
    vec::weighted_sum_8cols(p, v + c, vstride, keys, out + c);
  }
  for (; c < d; ++c) {
    float s = 0.0F;
    for (std::int64_t j = 0; j < keys; ++j) s = std::fma(p[j], v[j * vstride + c], s);
    out[c] = s;
  }
}

// scores[j] = q . k_j * scale (+ mask[j * mask_stride]) for j < keys, f32
// rows with unit stride along d (the decode attention's rows and sdpa's row
// walk). Where d is a multiple of eight, eight keys at a time with one
// transposing reduction (vec::dot_8rows), the keys past the last eight one
// by one: which of the
// two sums a key gets depends only on its index and the key count, so a
// row's scores depend on nothing but its operands.
void score_row_f32(const float* q, const float* k, std::int64_t kstride, std::int64_t keys,
                   std::int64_t d, float scale, const float* mask, std::int64_t mask_stride,
                   float* scores) {
  std::int64_t j = 0;
  if (d % vec::kLanes == 0) {
    for (; j + vec::kLanes <= keys; j += vec::kLanes) {
      vec::dot_8rows(q, k + j * kstride, kstride, d, scores + j);
    }
    for (std::int64_t i = 0; i < j; ++i) scores[i] *= scale;
  }
  for (; j < keys; ++j) scores[j] = vec::dot(q, k + j * kstride, d) * scale;
  if (mask != nullptr) {
    for (j = 0; j < keys; ++j) scores[j] += mask[j * mask_stride];
  }
}

// One query row of one head against `visible` cached positions, f32 rows
// with unit-stride head dims (the decode case), the inner loops vectorized
// (Note [Vectorized inner loops]): scores q.k * scale, a max-subtracted
// softmax, then the weighted sum of v rows, as the generic path computes
// it, summed in lanes. `scores` holds `visible` floats, `acc` d. attention
// and attention_rows both call this, so a batched row is bitwise the row
// computed alone.
void attend_row_f32(const float* qrow, const float* kbase, std::int64_t kstride, const float* vbase,
                    std::int64_t vstride, std::int64_t visible, std::int64_t d, float scale,
                    float* scores, float* acc, float* orow) {
  score_row_f32(qrow, kbase, kstride, visible, d, scale, nullptr, 0, scores);
  // The maximum in lanes: the same value as a sequential max (it is exact,
  // and vec::max skips NaN alike), without a chain of dependent compares.
  const float mx = vec::max(scores, visible);
  for (std::int64_t j = 0; j < visible; ++j) scores[j] = vec::exp(scores[j] - mx);
  const float sum = vec::sum(scores, visible);
  weigh_values_f32(scores, visible, vbase, vstride, d, acc);
  const float inv = 1.0F / sum;
  for (std::int64_t c = 0; c < d; ++c) orow[c] = acc[c] * inv;
}

// Attention over f32 rows with unit-stride head dims: one task per (query
// row, head), each attend_row_f32.
void attention_f32(const TensorArg& q, const TensorArg& k, const TensorArg& v, const TensorArg& o,
                   std::int64_t seq_len, float scale, std::int64_t group, KernelContext& ctx) {
  const std::int64_t t_len = q.sizes[0], hq = q.sizes[1], d = q.sizes[2];
  const std::int64_t cache = k.sizes[0];
  const auto* pq = q.ptr<float>();
  const auto* pk = k.ptr<float>();
  const auto* pv = v.ptr<float>();
  auto* po = o.ptr<float>();
  parallel_for(ctx, t_len * hq, grain_for(2 * seq_len * d),
               [&](std::int64_t begin, std::int64_t end) {
                 thread_local std::vector<float> scratch;
                 scratch.resize(static_cast<std::size_t>(cache + d));
                 for (std::int64_t task = begin; task < end; ++task) {
                   const std::int64_t t = task / hq;
                   const std::int64_t h = task % hq;
                   const std::int64_t kvh = h / group;
                   attend_row_f32(pq + t * q.strides[0] + h * q.strides[1], pk + kvh * k.strides[1],
                                  k.strides[0], pv + kvh * v.strides[1], v.strides[0],
                                  seq_len - t_len + t + 1, d, scale, scratch.data(),
                                  scratch.data() + cache, po + t * o.strides[0] + h * o.strides[1]);
                 }
               });
}

}  // namespace

void attention(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& q = args.tensors[0];
  const TensorArg& k = args.tensors[1];
  const TensorArg& v = args.tensors[2];
  const TensorArg& o = args.tensors[3];
  const std::int64_t seq_len = args.scalars[0].i;
  const auto scale = static_cast<float>(args.scalars[1].f);
  const std::int64_t t_len = q.sizes[0], hq = q.sizes[1], d = q.sizes[2];
  const std::int64_t cache = k.sizes[0], hkv = k.sizes[1];
  if (seq_len < t_len || seq_len > cache) {
    ctx.fail("seq_len " + std::to_string(seq_len) + " is out of range: expected " +
             std::to_string(t_len) + " <= seq_len <= " + std::to_string(cache) +
             " (the query rows and the cache length)");
    return;
  }
  const std::int64_t group = hq / hkv;
  if (q.dtype == DType::f32 && k.dtype == DType::f32 && v.dtype == DType::f32 &&
      o.dtype == DType::f32 && q.strides[2] == 1 && k.strides[2] == 1 && v.strides[2] == 1 &&
      o.strides[2] == 1) {
    attention_f32(q, k, v, o, seq_len, scale, group, ctx);
    return;
  }
  dispatch_float(q.dtype, [&]<typename T>() {
    const T* pq = static_cast<const T*>(q.data) + q.offset;
    const T* pk = static_cast<const T*>(k.data) + k.offset;
    const T* pv = static_cast<const T*>(v.data) + v.offset;
    T* po = static_cast<T*>(o.data) + o.offset;
    // One task per (query row, head); each thread keeps its own score buffer.
    parallel_for(
        ctx, t_len * hq, grain_for(2 * seq_len * d), [&](std::int64_t begin, std::int64_t end) {
          // Per thread: the scores, the query row and the output accumulator in f32.
          thread_local std::vector<float> scratch;
          scratch.resize(static_cast<std::size_t>(cache + 2 * d));
          float* scores = scratch.data();
          float* qf = scores + cache;
          float* acc = qf + d;
          for (std::int64_t task = begin; task < end; ++task) {
            const std::int64_t t = task / hq;
            const std::int64_t h = task % hq;
            const std::int64_t visible = seq_len - t_len + t + 1;  // positions 0 .. visible-1
            const std::int64_t kvh = h / group;
            const T* qrow = pq + t * q.strides[0] + h * q.strides[1];
            for (std::int64_t c = 0; c < d; ++c) qf[c] = load(qrow + c * q.strides[2]);
            float mx = -std::numeric_limits<float>::infinity();
            for (std::int64_t j = 0; j < visible; ++j) {
              const T* krow = pk + j * k.strides[0] + kvh * k.strides[1];
              float dot = 0.0F;
              if (k.strides[2] == 1) {
                for (std::int64_t c = 0; c < d; ++c) dot += qf[c] * load(krow + c);
              } else {
                for (std::int64_t c = 0; c < d; ++c) dot += qf[c] * load(krow + c * k.strides[2]);
              }
              dot *= scale;
              scores[j] = dot;
              mx = std::max(mx, dot);
            }
            float sum = 0.0F;
            for (std::int64_t j = 0; j < visible; ++j) {
              const float e = std::exp(scores[j] - mx);
              scores[j] = e;
              sum += e;
            }
            // acc[c] sums scores[j] * v[j][c] over j in order, row by row so the
            // cache is read contiguously.
            std::fill(acc, acc + d, 0.0F);
            for (std::int64_t j = 0; j < visible; ++j) {
              const T* vrow = pv + j * v.strides[0] + kvh * v.strides[1];
              const float w = scores[j];
              if (v.strides[2] == 1) {
                for (std::int64_t c = 0; c < d; ++c) acc[c] += w * load(vrow + c);
              } else {
                for (std::int64_t c = 0; c < d; ++c) acc[c] += w * load(vrow + c * v.strides[2]);
              }
            }
            const float inv = 1.0F / sum;
            T* orow = po + t * o.strides[0] + h * o.strides[1];
            for (std::int64_t c = 0; c < d; ++c) store(orow + c * o.strides[2], acc[c] * inv);
          }
        });
  });
}

// Batched decode attention: row b of q[B, Hq, D] against its own cache
// k, v[B, S, Hkv, D], positions 0 .. pos[b]. One task per (row, head), each
// attend_row_f32 as attention() runs it for a one-row query; split across
// the compute threads by tasks. Head dims must be unit-stride (checked: a
// view that is not is a kernel error naming the fix).
void attention_rows(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& q = args.tensors[0];
  const TensorArg& k = args.tensors[1];
  const TensorArg& v = args.tensors[2];
  const TensorArg& pos = args.tensors[3];
  const TensorArg& o = args.tensors[4];
  const auto scale = static_cast<float>(args.scalars[0].f);
  const std::int64_t rows = q.sizes[0], hq = q.sizes[1], d = q.sizes[2];
  const std::int64_t cache = k.sizes[1], hkv = k.sizes[2];
  if (q.strides[2] != 1 || k.strides[3] != 1 || v.strides[3] != 1 || o.strides[2] != 1) {
    ctx.fail(
        "the head dimension of q, k and v must be contiguous (stride 1); call contiguous() "
        "on a transposed view first");
    return;
  }
  const auto* pp = pos.ptr<std::int64_t>();
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < rows; ++b) {
    const std::int64_t p = pp[b * pos.strides[0]];
    if (p < 0 || p >= cache) {
      ctx.fail("position " + std::to_string(p) + " of row " + std::to_string(b) +
               " is out of range for a cache of " + std::to_string(cache) +
               " positions (expected 0 <= pos < " + std::to_string(cache) + ")");
      return;
    }
    longest = std::max(longest, p + 1);
  }
  const std::int64_t group = hq / hkv;
  const auto* pq = q.ptr<float>();
  const auto* pk = k.ptr<float>();
  const auto* pv = v.ptr<float>();
  auto* po = o.ptr<float>();
  parallel_for(ctx, rows * hq, grain_for(2 * longest * d),
               [&](std::int64_t begin, std::int64_t end) {
                 thread_local std::vector<float> scratch;
                 scratch.resize(static_cast<std::size_t>(cache + d));
                 for (std::int64_t task = begin; task < end; ++task) {
                   const std::int64_t b = task / hq;
                   const std::int64_t h = task % hq;
                   const std::int64_t kvh = h / group;
                   attend_row_f32(pq + b * q.strides[0] + h * q.strides[1],
                                  pk + b * k.strides[0] + kvh * k.strides[2], k.strides[1],
                                  pv + b * v.strides[0] + kvh * v.strides[2], v.strides[1],
                                  pp[b * pos.strides[0]] + 1, d, scale, scratch.data(),
                                  scratch.data() + cache, po + b * o.strides[0] + h * o.strides[1]);
                 }
               });
}

// Batched decode rope: row b of x[B, H, D] rotated for position pos[b], as
// rope() rotates a row at pos0 = pos[b].
void rope_rows(const ArgBlock& args, KernelContext&) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& pos = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  const auto theta = static_cast<float>(args.scalars[0].f);
  const bool half = args.scalars[1].i == 1;
  const auto* pp = pos.ptr<std::int64_t>();
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data) + x.offset;
    T* po = static_cast<T*>(o.data) + o.offset;
    for (std::int64_t b = 0; b < x.sizes[0]; ++b) {
      rope_token(px + b * x.strides[0], po + b * o.strides[0], x, o,
                 static_cast<float>(pp[b * pos.strides[0]]), theta, half);
    }
  });
}

// Multi-head attention over [B, L, E] rows, or over torch's heads-first
// [B, H, L, D] (k and v [B, Hkv, S, D], grouped heads): without a mask (the
// encoder case: every query sees every key), with an additive one
// (sdpa_mask), or causal (sdpa_causal: query i sees keys 0..i). One task per
// (batch, head, query row): the scores q.k * scale, a max-subtracted softmax
// normalized before the weighted sum (as softmax then matmul computes it),
// all in f32. Operands may have any strides (slices of one fused projection,
// a permuted view, a static KV cache); the result is [B, L, H * D].
namespace {

// How one q, k or v operand of sdpa is walked: element (b, head, row, c) is
// at b * batch + head * head + row * row + c * channel. The embedding form
// [B, rows, H * D] puts head h at column h * D; the heads-first form [B, H,
// rows, D] has a dim per index.
struct HeadsView {
  std::int64_t batch, head, row, channel;
};
HeadsView heads_view(const TensorArg& t, std::int64_t d) {
  if (t.ndim == 4) return {t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
  return {t.strides[0], d * t.strides[2], t.strides[1], t.strides[2]};
}

// Note [Query rows in blocks]
// Each query row's work is a pass over all of k (its scores) and all of v
// (the weighted sum): alone, a row of a 197-token ViT attention reads 100 KB
// of k and v from L2 per row, and sdpa_rows was the largest kernel in ViT's
// profile. A task takes up to kQueryBlock rows of one (batch, head) and, for
// each k or v row, updates all of them, so that row is read once per block.
// Per query row the arithmetic is unchanged (the same dot, the same
// exponentials and sums over keys in order, the same multiply-adds over v
// rows in order), so a row's result does not depend on the block around it,
// the rows' count or the thread count. (Long attention has since moved to
// products, Note [Long attention through products], and f32 rows with unit
// strides are now scored and weighed one row at a time within the block,
// Note [Value rows in registers]: a head's k and v rows at up to 32 query
// rows are read from L1 or L2 per row, and the walk is bound by arithmetic.
// The block stays for the strided and half-precision walk.)
constexpr std::int64_t kQueryBlock = 4;

// Note [Long attention through products]
// Past kMaxRowKernelQueries query rows and keys, attention is two matrix
// products per (batch, head) with a softmax between them, and oneDNN's
// products (Note [Matrix products through oneDNN]) run them faster than the
// row walk above: 4 heads of 64 on one thread measured 1.5-2.0x at 64 tokens
// and 2.1-3.1x at 128 to 256 (docs/performance.md, "Long attention through
// products"). So where the build has oneDNN and the operands are f32 with
// unit-stride rows, each (batch, head) runs: scores[L, S] = q_h @ k_h^T read
// in place (k's rows as a linear's weight), a softmax per row over the scaled
// scores (plus the mask, minus the keys a causal query does not see; a row
// whose every key is masked gets zero weights, so zeros, as torch's CPU
// kernel gives), then out_h = p @ v_h (v read in place as a row-major b) into
// a dense buffer copied to the head's columns. Several heads split across the
// compute threads, each running its products on its own thread; one head runs
// its products on all of them. The products are cut by shape alone either
// way, so the result does not depend on the thread count; it differs from the
// row walk by rounding (the products sum in oneDNN's order). Up to
// kMaxRowKernelQueries query rows (decoding, short sequences) the row walk
// stays, and so do f16/bf16 and strided operands.
constexpr std::int64_t kMaxRowKernelQueries = 32;

// One sdpa call's operands and sizes, read once from its argument block.
// `mask` null for none, else mask[B|1, H|1, L|1, S] (mask_strides 0 along a
// broadcast, size-1, dim).
struct SdpaProblem {
  const TensorArg& q_arg;
  const TensorArg& k_arg;
  const TensorArg& v_arg;
  const TensorArg& o;
  const TensorArg* mask;
  std::int64_t heads, batch, len, d, src;
  std::int64_t group;  // query heads per kv head (grouped-query attention, heads-first only)
  float scale;
  HeadsView q, k, v;
  std::int64_t mask_strides[4];
};

SdpaProblem sdpa_problem(const ArgBlock& args, const TensorArg* mask) {
  const TensorArg& q_arg = args.tensors[0];
  const TensorArg& k_arg = args.tensors[1];
  const std::int64_t heads = args.scalars[0].i;
  const bool heads_first = q_arg.ndim == 4;
  const std::int64_t d = heads_first ? q_arg.sizes[3] : q_arg.sizes[2] / heads;
  SdpaProblem p{q_arg,
                k_arg,
                args.tensors[2],
                args.tensors[mask != nullptr ? 4 : 3],
                mask,
                heads,
                q_arg.sizes[0],
                heads_first ? q_arg.sizes[2] : q_arg.sizes[1],
                d,
                heads_first ? k_arg.sizes[2] : k_arg.sizes[1],
                heads_first ? heads / k_arg.sizes[1] : 1,
                static_cast<float>(args.scalars[1].f),
                heads_view(q_arg, d),
                heads_view(k_arg, d),
                heads_view(args.tensors[2], d),
                {}};
  if (mask != nullptr) {
    for (int i = 0; i < 4; ++i) p.mask_strides[i] = mask->sizes[i] == 1 ? 0 : mask->strides[i];
  }
  return p;
}

// Returns false where the products path does not apply (Note [Long
// attention through products]); sdpa_rows then writes the whole output.
bool sdpa_products(const SdpaProblem& p, KernelContext& ctx, bool causal) {
  const TensorArg* mask = p.mask;
  if (!onednn::enabled() || p.q_arg.dtype != DType::f32 || p.k_arg.dtype != DType::f32 ||
      p.v_arg.dtype != DType::f32 || p.o.dtype != DType::f32 ||
      (mask != nullptr && mask->dtype != DType::f32))
    return false;
  const std::int64_t heads = p.heads, batch = p.batch, len = p.len, d = p.d, src = p.src;
  const std::int64_t group = p.group;
  const float scale = p.scale;
  if (len <= kMaxRowKernelQueries || src <= kMaxRowKernelQueries || d < 1) return false;
  const HeadsView& q = p.q;
  const HeadsView& k = p.k;
  const HeadsView& v = p.v;
  const TensorArg& o = p.o;
  if (q.channel != 1 || k.channel != 1 || v.channel != 1) return false;
  const float* pq = p.q_arg.ptr<float>();
  const float* pk = p.k_arg.ptr<float>();
  const float* pv = p.v_arg.ptr<float>();
  auto* po = o.ptr<float>();
  const float* pm = mask != nullptr ? mask->ptr<float>() : nullptr;
  const std::int64_t* ms = p.mask_strides;
  // One (batch, head) after another, each product on every compute thread
  // (one head), or the heads split across the compute threads, each running
  // its products on its own thread: the same blocks either way, so the same
  // bits (Note [Long attention through products]).
  const std::int64_t tasks = batch * heads;
  const bool by_heads = tasks >= 2;
  std::atomic<bool> declined{false};
  const auto head = [&](std::int64_t task, float* scores, float* out) {
    const std::int64_t b = task / heads, h = task % heads;
    const float* qbase = pq + b * q.batch + h * q.head;
    const float* kbase = pk + b * k.batch + (h / group) * k.head;
    const float* vbase = pv + b * v.batch + (h / group) * v.head;
    if (!onednn::matmul(kbase, k.row, 1, qbase, q.row, scores, src, len, src, d, ctx, by_heads)) {
      declined.store(true, std::memory_order_relaxed);
      return;
    }
    const auto softmax_rows = [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        float* sr = scores + i * src;
        const float* mrow = pm != nullptr ? pm + b * ms[0] + h * ms[1] + i * ms[2] : nullptr;
        const std::int64_t keys = causal ? std::min(src, i + 1) : src;
        // The maximum and the sum in lanes (vec::max, vec::sum): as
        // sequential loops they were chains of dependent instructions, 1.0
        // against 0.63 ms for 197 tokens (docs/performance.md, "Long
        // attention's softmax in lanes").
        for (std::int64_t j = 0; j < keys; ++j) sr[j] *= scale;
        if (mrow != nullptr) {
          for (std::int64_t j = 0; j < keys; ++j) sr[j] += mrow[j * ms[3]];
        }
        const float mx = vec::max(sr, keys);
        if (mx == -std::numeric_limits<float>::infinity()) {
          std::fill(sr, sr + src, 0.0F);  // every key masked: zeros
          continue;
        }
        softmax_row_f32_from_max(sr, sr, keys, mx);
        std::fill(sr + keys, sr + src, 0.0F);
      }
    };
    if (by_heads) {
      softmax_rows(0, len);
    } else {
      parallel_for(ctx, len, grain_for(4 * src), softmax_rows);
    }
    if (!onednn::matmul(vbase, 1, v.row, scores, src, out, d, len, d, src, ctx, by_heads)) {
      declined.store(true, std::memory_order_relaxed);
      return;
    }
    for (std::int64_t i = 0; i < len; ++i) {
      float* orow = po + b * o.strides[0] + i * o.strides[1] + h * d * o.strides[2];
      for (std::int64_t c = 0; c < d; ++c) orow[c * o.strides[2]] = out[i * d + c];
    }
  };
  const auto scratch = [&](std::vector<float>& buf) {
    buf.resize(static_cast<std::size_t>(len * (src + d)));
    return buf.data();
  };
  if (by_heads) {
    parallel_for(ctx, tasks, 1, [&](std::int64_t begin, std::int64_t end) {
      thread_local std::vector<float> buf;
      float* scores = scratch(buf);
      for (std::int64_t t = begin; t < end; ++t) head(t, scores, scores + len * src);
    });
  } else {
    std::vector<float> buf;
    float* scores = scratch(buf);
    head(0, scores, scores + len * src);
  }
  // The switch turned off meanwhile (another thread): the row walk writes it all.
  return !declined.load(std::memory_order_relaxed);
}

// `mask` null for none, else mask[B|1, H|1, L|1, S] added to the scaled
// scores (its broadcast dims have stride 0 or size 1). `causal`: the keys
// after the query's own index are left out, as torch's is_causal mask
// (tril aligned to the top left) leaves them.
void sdpa_rows(const ArgBlock& args, KernelContext& ctx, const TensorArg* mask, bool causal) {
  const SdpaProblem prob = sdpa_problem(args, mask);
  if (sdpa_products(prob, ctx, causal)) return;
  const TensorArg& q_arg = prob.q_arg;
  const TensorArg& k_arg = prob.k_arg;
  const TensorArg& v_arg = prob.v_arg;
  const TensorArg& o = prob.o;
  const std::int64_t heads = prob.heads, batch = prob.batch, len = prob.len, d = prob.d,
                     src = prob.src;
  const std::int64_t group = prob.group;
  const float scale = prob.scale;
  const HeadsView& q = prob.q;
  const HeadsView& k = prob.k;
  const HeadsView& v = prob.v;
  const std::int64_t* ms = prob.mask_strides;
  dispatch_float(q_arg.dtype, [&]<typename T>() {
    const T* pq = static_cast<const T*>(q_arg.data) + q_arg.offset;
    const T* pk = static_cast<const T*>(k_arg.data) + k_arg.offset;
    const T* pv = static_cast<const T*>(v_arg.data) + v_arg.offset;
    T* po = static_cast<T*>(o.data) + o.offset;
    const T* pm = mask != nullptr ? static_cast<const T*>(mask->data) + mask->offset : nullptr;
    const bool rows_f32 = std::is_same_v<T, float> && q.channel == 1 && k.channel == 1;
    // Note [Query rows in blocks]: a task is up to kQueryBlock query rows of
    // one (batch, head), so each k and v row is read once for all of them;
    // every row's sums run in the same order as alone.
    const std::int64_t blocks = (len + kQueryBlock - 1) / kQueryBlock;
    parallel_for(
        ctx, batch * heads * blocks, grain_for(2 * kQueryBlock * src * d),
        [&](std::int64_t begin, std::int64_t end) {
          thread_local std::vector<float> scratch;
          scratch.resize(static_cast<std::size_t>(kQueryBlock * (src + d)));
          float* scores = scratch.data();           // [kQueryBlock][src]
          float* acc = scores + kQueryBlock * src;  // [kQueryBlock][d]
          for (std::int64_t task = begin; task < end; ++task) {
            const std::int64_t i0 = (task % blocks) * kQueryBlock;
            const std::int64_t h = (task / blocks) % heads;
            const std::int64_t b = task / (blocks * heads);
            const std::int64_t nr = std::min(kQueryBlock, len - i0);
            const T* kbase = pk + b * k.batch + (h / group) * k.head;
            const T* vbase = pv + b * v.batch + (h / group) * v.head;
            const T* qrow[kQueryBlock] = {};
            const T* mrow[kQueryBlock] = {};
            std::int64_t keys[kQueryBlock] = {};
            float mx[kQueryBlock];
            std::int64_t most = 0;
            for (std::int64_t r = 0; r < nr; ++r) {
              const std::int64_t i = i0 + r;
              qrow[r] = pq + b * q.batch + h * q.head + i * q.row;
              mrow[r] = pm != nullptr ? pm + b * ms[0] + h * ms[1] + i * ms[2] : nullptr;
              keys[r] = causal ? std::min(src, i + 1) : src;
              most = std::max(most, keys[r]);
            }
            bool scored = false;
            if constexpr (std::is_same_v<T, float>) {
              if (rows_f32) {
                for (std::int64_t r = 0; r < nr; ++r) {
                  score_row_f32(qrow[r], kbase, k.row, keys[r], d, scale, mrow[r], ms[3],
                                scores + r * src);
                }
                scored = true;
              }
            }
            for (std::int64_t j = 0; j < most && !scored; ++j) {
              const T* krow = kbase + j * k.row;
              for (std::int64_t r = 0; r < nr; ++r) {
                if (j >= keys[r]) continue;
                float dot = 0.0F;
                for (std::int64_t c = 0; c < d; ++c) {
                  dot = std::fma(load(qrow[r] + c * q.channel), load(krow + c * k.channel), dot);
                }
                float& sc = scores[r * src + j];
                sc = dot * scale;
                if (mrow[r] != nullptr) sc += load(mrow[r] + j * ms[3]);
              }
            }
            // Each row's maximum afterwards, in lanes: kept in the loop above
            // it was a chain through memory, one per key.
            for (std::int64_t r = 0; r < nr; ++r) mx[r] = vec::max(scores + r * src, keys[r]);
            bool live[kQueryBlock] = {};
            for (std::int64_t r = 0; r < nr; ++r) {
              T* orow = po + b * o.strides[0] + (i0 + r) * o.strides[1] + h * d * o.strides[2];
              if (mrow[r] != nullptr && mx[r] == -std::numeric_limits<float>::infinity()) {
                // Every key masked: zeros, as torch's CPU kernel gives.
                for (std::int64_t c = 0; c < d; ++c) store(orow + c * o.strides[2], 0.0F);
                continue;
              }
              live[r] = true;
              // The weights in place: exponentials in lanes, their sum in
              // lanes, each scaled by its reciprocal.
              softmax_row_f32_from_max(scores + r * src, scores + r * src, keys[r], mx[r]);
            }
            // Note [Value rows in registers]
            if constexpr (std::is_same_v<T, float>) {
              if (v.channel == 1) {
                for (std::int64_t r = 0; r < nr; ++r) {
                  if (!live[r]) continue;
                  T* orow = po + b * o.strides[0] + (i0 + r) * o.strides[1] + h * d * o.strides[2];
                  float* out = o.strides[2] == 1 ? orow : acc + r * d;
                  weigh_values_f32(scores + r * src, keys[r], vbase, v.row, d, out);
                  if (out != orow) {
                    for (std::int64_t c = 0; c < d; ++c) orow[c * o.strides[2]] = out[c];
                  }
                }
                continue;
              }
            }
            for (std::int64_t r = 0; r < nr; ++r) {
              for (std::int64_t c = 0; c < d; ++c) acc[r * d + c] = 0.0F;
            }
            for (std::int64_t j = 0; j < most; ++j) {
              const T* vrow = vbase + j * v.row;
              for (std::int64_t r = 0; r < nr; ++r) {
                if (!live[r] || j >= keys[r]) continue;
                const float p = scores[r * src + j];
                float* ar = acc + r * d;
                for (std::int64_t c = 0; c < d; ++c) {
                  ar[c] = std::fma(p, load(vrow + c * v.channel), ar[c]);  // Note [Explicit fma]
                }
              }
            }
            for (std::int64_t r = 0; r < nr; ++r) {
              if (!live[r]) continue;
              T* orow = po + b * o.strides[0] + (i0 + r) * o.strides[1] + h * d * o.strides[2];
              for (std::int64_t c = 0; c < d; ++c) store(orow + c * o.strides[2], acc[r * d + c]);
            }
          }
        });
  });
}

}  // namespace

void sdpa(const ArgBlock& args, KernelContext& ctx) { sdpa_rows(args, ctx, nullptr, false); }
void sdpa_mask(const ArgBlock& args, KernelContext& ctx) {
  sdpa_rows(args, ctx, &args.tensors[3], false);
}
void sdpa_causal(const ArgBlock& args, KernelContext& ctx) { sdpa_rows(args, ctx, nullptr, true); }

}  // namespace sinkgraph::kernels::cpu
