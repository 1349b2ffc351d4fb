// Inference batch_norm and max_pool2d (conv2d is conv.cpp).
//
// This file builds with -ffp-contract=off (src/CMakeLists.txt): batch_norm
// computes y = x * alpha + beta as a product and a sum, each rounded to f32,
// exactly as PyTorch's CPU kernel does (Vectorized operator* then operator+);
// a fused multiply-add would round once and differ in the last bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common.h"
#include "kernels.h"

namespace sinkgraph::kernels::cpu {

// tensors (x, mean, var, weight, bias, out); scalars (eps: f). x is [N, C, ...].
// As PyTorch's batch_norm_cpu_collect_linear_and_constant_terms (eval mode):
// invstd = 1 / sqrt(var + eps), alpha = invstd * weight, beta = bias - mean *
// alpha, all in f32; then y = x * alpha + beta.
void batch_norm(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& out = args.tensors[5];
  const auto eps = static_cast<float>(args.scalars[0].f);
  const std::int64_t channels = x.sizes[1];
  // Per-channel terms in a scratch the worker keeps. The intra-op helper
  // threads below see them through these pointers: a thread_local named
  // inside their lambda would be the helper's own.
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<std::size_t>(2 * channels));
  float* alpha = scratch.data();
  float* beta = alpha + channels;
  dispatch_float(x.dtype, [&]<typename T>() {
    const auto param = [&](int i, std::int64_t c) -> float {
      const TensorArg& t = args.tensors[i];
      return load(t.ptr<T>() + c * t.strides[0]);
    };
    for (std::int64_t c = 0; c < channels; ++c) {
      const float invstd = 1.0F / std::sqrt(param(2, c) + eps);
      const auto u = static_cast<std::size_t>(c);
      alpha[u] = invstd * param(3, c);
      beta[u] = param(4, c) - param(1, c) * alpha[u];
    }
    const T* px = static_cast<const T*>(x.data);
    T* po = static_cast<T*>(out.data);
    std::int64_t outer = x.sizes[0];
    std::int64_t inner = 1;
    for (int i = 2; i < x.ndim; ++i) inner *= x.sizes[i];
    if (x.is_contiguous() && out.is_contiguous()) {
      px += x.offset;
      po += out.offset;
      parallel_for(ctx, outer * channels,
                   std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(inner, 1)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t r = begin; r < end; ++r) {
                       const auto u = static_cast<std::size_t>(r % channels);
                       const float a = alpha[u];
                       const float b = beta[u];
                       const T* src = px + r * inner;
                       T* dst = po + r * inner;
                       for (std::int64_t i = 0; i < inner; ++i)
                         store(dst + i, load(src + i) * a + b);
                     }
                   });
      return;
    }
    // Strided: for each (n, c), the trailing dims by rows.
    std::int64_t strides[2][kMaxDims] = {};
    std::int64_t sizes[kMaxDims] = {};
    const int rest = x.ndim - 2;
    for (int i = 0; i < rest; ++i) {
      sizes[i] = x.sizes[i + 2];
      strides[0][i] = x.strides[i + 2];
      strides[1][i] = out.strides[i + 2];
    }
    for (std::int64_t n = 0; n < outer; ++n) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const auto u = static_cast<std::size_t>(c);
        const float a = alpha[u];
        const float b = beta[u];
        const std::int64_t base[2] = {x.offset + n * x.strides[0] + c * x.strides[1],
                                      out.offset + n * out.strides[0] + c * out.strides[1]};
        for_each_row<2>(rest, sizes, strides, base,
                        [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                          for (std::int64_t i = 0; i < count; ++i) {
                            store(po + off[1] + i * st[1], load(px + off[0] + i * st[0]) * a + b);
                          }
                        });
      }
    }
  });
}

namespace {

// The taps [t0, t1) of a window starting at `start` (taps `dil` apart, `k`
// of them) that fall inside [0, size).
void taps_inside(std::int64_t start, std::int64_t dil, std::int64_t k, std::int64_t size,
                 std::int64_t& t0, std::int64_t& t1) {
  t0 = start >= 0 ? 0 : (-start + dil - 1) / dil;
  t1 = start >= size ? 0 : std::min(k, (size - 1 - start) / dil + 1);
  t1 = std::max(t0, t1);
}

// The larger of a running maximum and v, where a NaN wins and then stays:
// written as a select, not a branch, so that the compiler makes it a
// compare and a blend over a row (as a branch, mispredicted about every
// other value, max_pool2d took 12% of `perf`'s samples of resnet18 at 224²
// in max-autotune).
float max_or_nan(float best, float v) { return (v > best || v != v) ? v : best; }

}  // namespace

// Note [Pooling a window in two passes]
// max_pool2d takes an output row's windows one input row at a time: first
// the maximum across each output's columns of that row (the outputs whose
// window lies inside the row one tap at a time across them, a loop the
// compiler vectorizes; those at the edges over the taps inside), then the
// running maximum over the window's rows (a pass over adjacent outputs).
// A later value replaces the maximum only when greater (or NaN) in both
// passes, so the value kept is the one PyTorch's loop keeps, row by row
// and column by column: the same bits, a tie between +0.0 and -0.0 and
// which NaN included. (Maxing down the columns first, as a first version
// did, kept the first zero of the first column instead.)

// tensors (x, out), x [N, C, H, W] or [C, H, W]; scalars (kh, kw, sh, sw, ph,
// pw, dh, dw) (Note [Kernel scalars]: ceil_mode only sized the output). As
// PyTorch: padding never wins (only positions inside the input are read), and
// a NaN in a window is the window's maximum.
void max_pool2d(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& out = args.tensors[1];
  const std::int64_t kh = args.scalars[0].i, kw = args.scalars[1].i;
  const std::int64_t sh = args.scalars[2].i, sw = args.scalars[3].i;
  const std::int64_t ph = args.scalars[4].i, pw = args.scalars[5].i;
  const std::int64_t dh = args.scalars[6].i, dw = args.scalars[7].i;
  const int nd = x.ndim;
  const std::int64_t batch = nd == 4 ? x.sizes[0] : 1;
  const std::int64_t channels = x.sizes[nd - 3];
  const std::int64_t h = x.sizes[nd - 2], w = x.sizes[nd - 1];
  const std::int64_t oh = out.sizes[nd - 2], ow = out.sizes[nd - 1];
  const std::int64_t xs_n = nd == 4 ? x.strides[0] : 0, os_n = nd == 4 ? out.strides[0] : 0;
  const std::int64_t xs_c = x.strides[nd - 3], os_c = out.strides[nd - 3];
  const std::int64_t xs_h = x.strides[nd - 2], xs_w = x.strides[nd - 1];
  const std::int64_t os_h = out.strides[nd - 2], os_w = out.strides[nd - 1];
  // Outputs [j_lo, j_hi) have every tap of their window inside the row.
  const std::int64_t j_lo = std::min(ow, (pw + sw - 1) / sw);
  const std::int64_t last = w - 1 - (kw - 1) * dw + pw;  // the largest j * sw allowed
  const std::int64_t j_hi = last < 0 ? j_lo : std::clamp(last / sw + 1, j_lo, ow);
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data) + x.offset;
    T* po = static_cast<T*>(out.data) + out.offset;
    parallel_for(ctx, batch * channels,
                 std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(oh * ow, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   // One input row (as f32, adjacent), its outputs' maxima across
                   // columns, and the output row; per thread (helpers included).
                   thread_local std::vector<float> buffer;
                   buffer.resize(static_cast<std::size_t>(w + 2 * ow));
                   float* in = buffer.data();
                   float* across = in + w;
                   float* orow = across + ow;
                   for (std::int64_t plane = begin; plane < end; ++plane) {
                     const std::int64_t n = plane / channels, c = plane % channels;
                     const T* src = px + n * xs_n + c * xs_c;
                     T* dst = po + n * os_n + c * os_c;
                     for (std::int64_t i = 0; i < oh; ++i) {
                       const std::int64_t h0 = i * sh - ph;
                       std::int64_t a0 = 0, a1 = 0;
                       taps_inside(h0, dh, kh, h, a0, a1);
                       std::fill(orow, orow + ow, kLowest);
                       for (std::int64_t a = a0; a < a1; ++a) {
                         const T* row = src + (h0 + a * dh) * xs_h;
                         for (std::int64_t col = 0; col < w; ++col)
                           in[col] = load(row + col * xs_w);
                         std::fill(across + j_lo, across + j_hi, kLowest);
                         for (std::int64_t b = 0; b < kw; ++b) {
                           const std::int64_t shift = b * dw - pw;
                           for (std::int64_t j = j_lo; j < j_hi; ++j)
                             across[j] = max_or_nan(across[j], in[j * sw + shift]);
                         }
                         const auto edge = [&](std::int64_t j) {
                           const std::int64_t w0 = j * sw - pw;
                           std::int64_t b0 = 0, b1 = 0;
                           taps_inside(w0, dw, kw, w, b0, b1);
                           float best = kLowest;
                           for (std::int64_t b = b0; b < b1; ++b)
                             best = max_or_nan(best, in[w0 + b * dw]);
                           across[j] = best;
                         };
                         for (std::int64_t j = 0; j < j_lo; ++j) edge(j);
                         for (std::int64_t j = j_hi; j < ow; ++j) edge(j);
                         for (std::int64_t j = 0; j < ow; ++j)
                           orow[j] = max_or_nan(orow[j], across[j]);
                       }
                       for (std::int64_t j = 0; j < ow; ++j)
                         store(dst + i * os_h + j * os_w, orow[j]);
                     }
                   }
                 });
  });
}

}  // namespace sinkgraph::kernels::cpu
