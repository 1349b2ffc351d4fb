#include <algorithm>
#include <cmath>

#include "common.h"
#include "kernels.h"
#include "pointwise_math.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu {

namespace {

// The contiguous loops, flattened: everything they call (the op, vec::exp,
// load and store) is inlined into them, so that the f32 loop vectorizes.
// Left to GCC's inliner, the kernels that instantiate a loop per dtype
// (silu, sigmoid, exp) kept a call per element in the f32 loop, wherever the
// inliner's budget ran out (vec::exp, pointwise::silu or the op): a scalar
// loop that cost stories260K's reduce-overhead token ~4 us (docs/performance.md,
// "Generated code, fourth part").
template <typename Op, typename T>
[[gnu::flatten]] void binary_span(const T* a, const T* b, T* out, std::int64_t begin,
                                  std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) store(out + i, Op{}(load(a + i), load(b + i)));
}

template <typename Op, typename T>
[[gnu::flatten]] void unary_span(const T* x, T* out, float scalar, std::int64_t begin,
                                 std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) store(out + i, Op{}(load(x + i), scalar));
}

// Note [A broadcast row]
// The broadcasts graphs are made of are mostly one kind: a contiguous operand
// with the output's trailing dims (its leading ones 1) against a contiguous
// operand of the output's whole shape: a linear's bias added to a matmul's
// [M, N] result, a layer scale [C] times an [N, H, W, C] activation, an
// attention mask, a scalar. The output is then that operand's block
// repeated, and each block a contiguous loop, vectorized like the unbroadcast
// one and split across the compute threads by blocks. The general loop below
// walks innermost rows with their strides, element by element, on one thread:
// a [3136, 384] + [384] add took it 1.7x as long on one thread, a fresh
// output's allocation included (docs/performance.md, "Batch norms folded per
// call"). Every element is the same op on the same two values either way, so
// the result is the same bits.

// The element count of `t`'s block when t is contiguous and has the trailing
// dims of `o` (any leading dims of t being 1): o's shape is then t's block
// repeated o.numel() / block times. 0 when t is not such an operand.
std::int64_t repeated_block(const TensorArg& t, const TensorArg& o) {
  if (!t.is_contiguous()) return 0;
  int lead = 0;
  while (lead < t.ndim && t.sizes[lead] == 1) ++lead;
  const int rank = t.ndim - lead;
  if (rank > o.ndim) return 0;
  std::int64_t block = 1;
  for (int i = 0; i < rank; ++i) {
    if (t.sizes[lead + i] != o.sizes[o.ndim - rank + i]) return 0;
    block *= t.sizes[lead + i];
  }
  return block;
}

// out[r * block + j] = op(full[r * block + j], row[j]) for rows [begin, end),
// the operands in the op's order (RowFirst: op(row[j], full[...])).
template <typename Op, bool RowFirst, typename T>
[[gnu::flatten]] void repeated_span(const T* full, const T* row, T* out, std::int64_t block,
                                    std::int64_t begin, std::int64_t end) {
  if (block == 1) {  // a scalar: one loop over the whole span
    const auto s = load(row);
    for (std::int64_t i = begin; i < end; ++i) {
      const auto f = load(full + i);
      store(out + i, RowFirst ? Op{}(s, f) : Op{}(f, s));
    }
    return;
  }
  for (std::int64_t r = begin; r < end; ++r) {
    const T* fr = full + r * block;
    T* orow = out + r * block;
    for (std::int64_t j = 0; j < block; ++j) {
      const auto f = load(fr + j);
      const auto w = load(row + j);
      store(orow + j, RowFirst ? Op{}(w, f) : Op{}(f, w));
    }
  }
}

// out = op(a, b) with broadcasting; a, b and out share one dtype.
template <typename Op>
void binary(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& a = args.tensors[0];
  const TensorArg& b = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  dispatch_all(o.dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      SG_ASSERT(false, "bool arithmetic is rejected by the shape function");
    } else {
      const T* pa = static_cast<const T*>(a.data);
      const T* pb = static_cast<const T*>(b.data);
      T* po = static_cast<T*>(o.data);
      const std::int64_t n = o.numel();
      if (a.is_contiguous() && b.is_contiguous() && o.is_contiguous() && a.numel() == n &&
          b.numel() == n) {
        pa += a.offset;
        pb += b.offset;
        po += o.offset;
        parallel_for(ctx, n, kMinParallelWork, [&](std::int64_t begin, std::int64_t end) {
          binary_span<Op>(pa, pb, po, begin, end);
        });
        return;
      }
      // Note [A broadcast row]: one operand whole, the other a repeated block.
      if (o.is_contiguous() && n > 0) {
        const auto whole = [&](const TensorArg& t) { return t.is_contiguous() && t.numel() == n; };
        const std::int64_t block_b = whole(a) ? repeated_block(b, o) : 0;
        const std::int64_t block_a = block_b == 0 && whole(b) ? repeated_block(a, o) : 0;
        if (block_b > 0 || block_a > 0) {
          const bool row_first = block_a > 0;
          const std::int64_t block = row_first ? block_a : block_b;
          const T* full = row_first ? pb + b.offset : pa + a.offset;
          const T* row = row_first ? pa + a.offset : pb + b.offset;
          po += o.offset;
          // A scalar is one span of n elements; a row, n / block spans.
          const std::int64_t units = block == 1 ? n : n / block;
          const std::int64_t grain = block == 1 ? kMinParallelWork : grain_for(block);
          parallel_for(ctx, units, grain, [&](std::int64_t begin, std::int64_t end) {
            if (row_first) {
              repeated_span<Op, true>(full, row, po, block, begin, end);
            } else {
              repeated_span<Op, false>(full, row, po, block, begin, end);
            }
          });
          return;
        }
      }
      std::int64_t strides[3][kMaxDims] = {};
      broadcast_strides(a, o.ndim, o.sizes, strides[0]);
      broadcast_strides(b, o.ndim, o.sizes, strides[1]);
      for (int i = 0; i < o.ndim; ++i) strides[2][i] = o.strides[i];
      const std::int64_t base[3] = {a.offset, b.offset, o.offset};
      // Note [Coalesced rows]: rows as long as the strides allow, each a
      // vectorized loop where its strides are 1 or a broadcast value's 0.
      parallel_rows<3>(ctx, o.ndim, o.sizes, strides, base,
                       [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                         const T* ra = pa + off[0];
                         const T* rb = pb + off[1];
                         T* ro = po + off[2];
                         if (st[2] == 1 && st[0] == 1 && st[1] == 1) {
                           binary_span<Op>(ra, rb, ro, 0, count);
                         } else if (st[2] == 1 && st[0] == 1 && st[1] == 0) {
                           repeated_span<Op, false>(ra, rb, ro, 1, 0, count);
                         } else if (st[2] == 1 && st[0] == 0 && st[1] == 1) {
                           repeated_span<Op, true>(rb, ra, ro, 1, 0, count);
                         } else {
                           for (std::int64_t i = 0; i < count; ++i)
                             store(ro + i * st[2],
                                   Op{}(load(ra + i * st[0]), load(rb + i * st[1])));
                         }
                       });
    }
  });
}

// out = op(x) over floating dtypes; `scalar` is args.scalars[0].f when used.
template <typename Op>
void unary(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& o = args.tensors[1];
  const float scalar = args.num_scalars > 0 ? static_cast<float>(args.scalars[0].f) : 0.0F;
  dispatch_float(o.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    T* po = static_cast<T*>(o.data);
    if (x.is_contiguous() && o.is_contiguous()) {
      const std::int64_t n = o.numel();
      px += x.offset;
      po += o.offset;
      parallel_for(ctx, n, kMinParallelWork, [&](std::int64_t begin, std::int64_t end) {
        unary_span<Op>(px, po, scalar, begin, end);
      });
      return;
    }
    std::int64_t strides[2][kMaxDims] = {};
    for (int i = 0; i < o.ndim; ++i) {
      strides[0][i] = x.strides[i];
      strides[1][i] = o.strides[i];
    }
    const std::int64_t base[2] = {x.offset, o.offset};
    parallel_rows<2>(ctx, o.ndim, o.sizes, strides, base,
                     [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                       if (st[0] == 1 && st[1] == 1) {
                         unary_span<Op>(px + off[0], po + off[1], scalar, 0, count);
                         return;
                       }
                       for (std::int64_t i = 0; i < count; ++i) {
                         store(po + off[1] + i * st[1],
                               Op{}(load(px + off[0] + i * st[0]), scalar));
                       }
                     });
  });
}

struct Add {
  template <typename V>
  V operator()(V a, V b) const {
    return a + b;
  }
};
struct Sub {
  template <typename V>
  V operator()(V a, V b) const {
    return a - b;
  }
};
struct Mul {
  template <typename V>
  V operator()(V a, V b) const {
    return a * b;
  }
};
struct Div {
  template <typename V>
  V operator()(V a, V b) const {
    return a / b;
  }
};

struct AddScalar {
  float operator()(float x, float s) const { return x + s; }
};
struct MulScalar {
  float operator()(float x, float s) const { return x * s; }
};
struct Neg {
  float operator()(float x, float) const { return -x; }
};
struct Exp {
  float operator()(float x, float) const { return vec::exp(x); }
};
struct Sqrt {
  float operator()(float x, float) const { return std::sqrt(x); }
};
struct Rsqrt {
  float operator()(float x, float) const { return 1.0F / std::sqrt(x); }
};
struct Erf {
  float operator()(float x, float) const { return vec::erf(x); }
};
struct Relu {
  float operator()(float x, float) const { return pointwise::relu(x); }
};
struct Silu {
  float operator()(float x, float) const { return pointwise::silu(x); }
};
struct Gelu {
  float operator()(float x, float) const { return pointwise::gelu(x); }
};
struct Tanh {
  float operator()(float x, float) const { return std::tanh(x); }
};
struct Sigmoid {
  float operator()(float x, float) const { return pointwise::sigmoid(x); }
};
struct Hardswish {
  float operator()(float x, float) const { return pointwise::hardswish(x); }
};
struct Hardsigmoid {
  float operator()(float x, float) const { return pointwise::hardsigmoid(x); }
};
struct Cos {
  float operator()(float x, float) const { return std::cos(x); }
};
struct Sin {
  float operator()(float x, float) const { return std::sin(x); }
};

}  // namespace

void add(const ArgBlock& a, KernelContext& c) { binary<Add>(a, c); }
void sub(const ArgBlock& a, KernelContext& c) { binary<Sub>(a, c); }
void mul(const ArgBlock& a, KernelContext& c) { binary<Mul>(a, c); }
void div(const ArgBlock& a, KernelContext& c) { binary<Div>(a, c); }
void add_scalar(const ArgBlock& a, KernelContext& c) { unary<AddScalar>(a, c); }
void mul_scalar(const ArgBlock& a, KernelContext& c) { unary<MulScalar>(a, c); }
void neg(const ArgBlock& a, KernelContext& c) { unary<Neg>(a, c); }
void exp(const ArgBlock& a, KernelContext& c) { unary<Exp>(a, c); }
void sqrt(const ArgBlock& a, KernelContext& c) { unary<Sqrt>(a, c); }
void rsqrt(const ArgBlock& a, KernelContext& c) { unary<Rsqrt>(a, c); }
void erf(const ArgBlock& a, KernelContext& c) { unary<Erf>(a, c); }
void relu(const ArgBlock& a, KernelContext& c) { unary<Relu>(a, c); }
void silu(const ArgBlock& a, KernelContext& c) { unary<Silu>(a, c); }
void gelu(const ArgBlock& a, KernelContext& c) { unary<Gelu>(a, c); }
void tanh(const ArgBlock& a, KernelContext& c) { unary<Tanh>(a, c); }
void sigmoid(const ArgBlock& a, KernelContext& c) { unary<Sigmoid>(a, c); }
void hardswish(const ArgBlock& a, KernelContext& c) { unary<Hardswish>(a, c); }
void hardsigmoid(const ArgBlock& a, KernelContext& c) { unary<Hardsigmoid>(a, c); }
void cos(const ArgBlock& a, KernelContext& c) { unary<Cos>(a, c); }

void where(const ArgBlock& args, KernelContext& /*ctx*/) {
  const TensorArg& cond = args.tensors[0];
  const TensorArg& a = args.tensors[1];
  const TensorArg& b = args.tensors[2];
  const TensorArg& o = args.tensors[3];
  dispatch_all(o.dtype, [&]<typename T>() {
    const bool* pc = static_cast<const bool*>(cond.data);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* po = static_cast<T*>(o.data);
    std::int64_t strides[4][kMaxDims] = {};
    broadcast_strides(cond, o.ndim, o.sizes, strides[0]);
    broadcast_strides(a, o.ndim, o.sizes, strides[1]);
    broadcast_strides(b, o.ndim, o.sizes, strides[2]);
    const int nd = std::min(o.ndim, kMaxDims);  // (GCC cannot see that the ABI bounds ndim)
    for (int i = 0; i < nd; ++i) strides[3][i] = o.strides[i];
    const std::int64_t base[4] = {cond.offset, a.offset, b.offset, o.offset};
    // Elements are copied, never converted: a NaN or -inf passes through.
    for_each_row<4>(o.ndim, o.sizes, strides, base,
                    [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                      for (std::int64_t i = 0; i < count; ++i) {
                        po[off[3] + i * st[3]] = pc[off[0] + i * st[0]] ? pa[off[1] + i * st[1]]
                                                                        : pb[off[2] + i * st[2]];
                      }
                    });
  });
}
void sin(const ArgBlock& a, KernelContext& c) { unary<Sin>(a, c); }

void compare(const ArgBlock& args, KernelContext& /*ctx*/) {
  const TensorArg& a = args.tensors[0];
  const TensorArg& b = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  const std::int64_t op = args.scalars[0].i;
  dispatch_all(a.dtype, [&]<typename T>() {
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    bool* po = static_cast<bool*>(o.data);
    std::int64_t strides[3][kMaxDims] = {};
    broadcast_strides(a, o.ndim, o.sizes, strides[0]);
    broadcast_strides(b, o.ndim, o.sizes, strides[1]);
    const int nd = std::min(o.ndim, kMaxDims);  // (GCC cannot see that the ABI bounds ndim)
    for (int i = 0; i < nd; ++i) strides[2][i] = o.strides[i];
    const std::int64_t base[3] = {a.offset, b.offset, o.offset};
    // One loop per comparison, so that each is a plain vectorizable loop.
    const auto run = [&](auto cmp) {
      for_each_row<3>(o.ndim, o.sizes, strides, base,
                      [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                        for (std::int64_t i = 0; i < count; ++i) {
                          po[off[2] + i * st[2]] =
                              cmp(load(pa + off[0] + i * st[0]), load(pb + off[1] + i * st[1]));
                        }
                      });
    };
    // op is ops::Comparison's value (eq, ne, lt, le, gt, ge); the kernels
    // sit below the operators' header.
    switch (op) {
      case 0:
        return run([](auto x, auto y) { return x == y; });
      case 1:
        return run([](auto x, auto y) { return x != y; });
      case 2:
        return run([](auto x, auto y) { return x < y; });
      case 3:
        return run([](auto x, auto y) { return x <= y; });
      case 4:
        return run([](auto x, auto y) { return x > y; });
      case 5:
        return run([](auto x, auto y) { return x >= y; });
      default:
        break;
    }
    SG_ASSERT(false, "compare: op ", op, " (the shape function checks it)");
  });
}

}  // namespace sinkgraph::kernels::cpu
