// conv2d over NCHW f32 tensors: tensors (x, w, b, out); scalars (stride_h,
// stride_w, pad_h, pad_w, dil_h, dil_w, groups, activation).
//
// Through oneDNN where it is faster (Note [Convolutions through oneDNN] in
// onednn.h); otherwise three paths of our own, each computing the plain sum of products per output
// element, then adding the bias, then applying the activation epilogue (-1: none, else a
// fused::UnaryFn index, computed by pointwise::unary exactly as the separate unary kernels compute
// it, so conv2d(act) is bitwise activation(conv2d)):
// - depthwise (groups == C, one input channel per group, any channel
//   multiplier): a direct loop per output plane, the kernel taps outermost and
//   the output row innermost (unit stride over the input row when stride_w is 1);
// - 1x1, stride 1, no padding: one GEMM per (image, group) straight over the
//   input plane, [O/g, C/g] @ [C/g, H*W];
// - otherwise im2col into a scratch matrix [C/g*KH*KW, Ho*Wo] and one GEMM
//   per (image, group).
// Each GEMM is oneDNN's matmul where the build has it, else OpenBLAS holding
// its lock (Note [OpenBLAS is not reentrant] in linalg.cpp).
// Strided inputs are first copied into contiguous scratch. The output is
// written in place when each output plane is one dense run (any channel and
// batch strides); otherwise through a scratch plane. Scratch buffers are
// thread_local vectors that grow and are kept: a stream's worker reuses them,
// so steady-state calls allocate nothing.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <cblas.h>

#include "blas.h"
#include "common.h"
#include "kernels.h"
#include "onednn.h"
#include "pointwise_math.h"

namespace sinkgraph::kernels::cpu {

namespace {

struct Conv {
  std::int64_t n, c, h, w;  // input
  std::int64_t o, kh, kw;   // weight [O, C/groups, KH, KW]
  std::int64_t oh, ow;      // output plane
  std::int64_t sh, sw, ph, pw, dh, dw, groups;
  std::int64_t cg, og;  // channels per group, in and out
};

// `t` as a dense f32 array: its own memory when contiguous, else a copy in `scratch`.
const float* dense(const TensorArg& t, std::vector<float>& scratch) {
  if (t.is_contiguous()) return t.ptr<float>();
  scratch.resize(static_cast<std::size_t>(t.numel()));
  std::int64_t strides[2][kMaxDims] = {};
  std::int64_t step = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    strides[0][i] = t.strides[i];
    strides[1][i] = step;
    step *= t.sizes[i];
  }
  const std::int64_t base[2] = {t.offset, 0};
  const auto* src = static_cast<const float*>(t.data);
  float* dst = scratch.data();
  for_each_row<2>(t.ndim, t.sizes, strides, base,
                  [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                    for (std::int64_t i = 0; i < count; ++i)
                      dst[off[1] + i] = src[off[0] + i * st[0]];
                  });
  return dst;
}

// The epilogue over one output plane: bias, then the activation.
using FinishFn = void (*)(float* p, std::int64_t n, float bias);

template <int Act>
void finish(float* p, std::int64_t n, float bias) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = p[i] + bias;
    if constexpr (Act < 0) {
      p[i] = v;
    } else {
      p[i] = pointwise::unary(Act, v);
    }
  }
}

FinishFn finisher(std::int64_t act) {
  static_assert(fused::kNumUnary == 14, "a new unary function needs its epilogue here");
  static constexpr FinishFn kTable[] = {
      finish<-1>,
      finish<fused::kNeg>,
      finish<fused::kExp>,
      finish<fused::kSqrt>,
      finish<fused::kRsqrt>,
      finish<fused::kErf>,
      finish<fused::kRelu>,
      finish<fused::kSilu>,
      finish<fused::kGelu>,
      finish<fused::kTanh>,
      finish<fused::kSigmoid>,
      finish<fused::kHardswish>,
      finish<fused::kHardsigmoid>,
      finish<fused::kCos>,
      finish<fused::kSin>,
  };
  SG_ASSERT(act >= -1 && act < fused::kNumUnary, "conv2d: activation ", act,
            " is rejected by the shape function");
  return kTable[act + 1];
}

// Output columns ow whose input column ow * stride + off lies in [0, width):
// [lo, hi), clamped to [0, out_w].
void valid_range(std::int64_t off, std::int64_t stride, std::int64_t width, std::int64_t out_w,
                 std::int64_t& lo, std::int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = width - 1 - off < 0 ? 0 : (width - 1 - off) / stride + 1;
  lo = std::min(lo, out_w);
  hi = std::clamp(hi, lo, out_w);
}

// col[(c * KH + i) * KW + j][oh * Wo + ow] = x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw], 0 outside.
void im2col(const float* x, const Conv& p, float* col) {
  const std::int64_t plane = p.oh * p.ow;
  for (std::int64_t c = 0; c < p.cg; ++c) {
    for (std::int64_t i = 0; i < p.kh; ++i) {
      for (std::int64_t j = 0; j < p.kw; ++j) {
        float* row = col + ((c * p.kh + i) * p.kw + j) * plane;
        const std::int64_t off = j * p.dw - p.pw;
        std::int64_t lo = 0, hi = 0;
        valid_range(off, p.sw, p.w, p.ow, lo, hi);
        for (std::int64_t oh = 0; oh < p.oh; ++oh) {
          float* dst = row + oh * p.ow;
          const std::int64_t ih = oh * p.sh - p.ph + i * p.dh;
          if (ih < 0 || ih >= p.h) {
            std::fill(dst, dst + p.ow, 0.0F);
            continue;
          }
          const float* src = x + (c * p.h + ih) * p.w;
          std::fill(dst, dst + lo, 0.0F);
          if (p.sw == 1) {
            std::copy(src + lo + off, src + hi + off, dst + lo);
          } else {
            for (std::int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * p.sw + off];
          }
          std::fill(dst + hi, dst + p.ow, 0.0F);
        }
      }
    }
  }
}

// One output plane of a depthwise convolution: y[Ho*Wo] = sum over taps of
// w[i, j] * x (one input channel plane), before bias and activation.
void depthwise_plane(const float* x, const float* w, const Conv& p, float* y) {
  std::fill(y, y + p.oh * p.ow, 0.0F);
  for (std::int64_t oh = 0; oh < p.oh; ++oh) {
    float* yr = y + oh * p.ow;
    for (std::int64_t i = 0; i < p.kh; ++i) {
      const std::int64_t ih = oh * p.sh - p.ph + i * p.dh;
      if (ih < 0 || ih >= p.h) continue;
      const float* xr = x + ih * p.w;
      for (std::int64_t j = 0; j < p.kw; ++j) {
        const float wv = w[i * p.kw + j];
        const std::int64_t off = j * p.dw - p.pw;
        std::int64_t lo = 0, hi = 0;
        valid_range(off, p.sw, p.w, p.ow, lo, hi);
        if (p.sw == 1) {
          const float* xs = xr + off;
          for (std::int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xs[ow];
        } else {
          for (std::int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * p.sw + off];
        }
      }
    }
  }
}

// y[M, N] (row stride ldy) = a[M, K] @ b[K, N], both dense row-major:
// oneDNN's matmul where the build has it (split across the compute threads,
// Note [Matrix products through oneDNN]), else serial OpenBLAS. Measured on
// resnet18's 3x3 layers at 4x4 outputs, which take this path (onednn_conv.cpp,
// kMinPositions): OpenBLAS 0.3.21's sgemm ran at a fifth of oneDNN's rate on
// a CPU it does not know and picks generic kernels for (docs/performance.md,
// "Convolutions that are products").
void sgemm(const float* a, const float* b, float* y, std::int64_t m, std::int64_t n, std::int64_t k,
           std::int64_t ldb, std::int64_t ldy, KernelContext& ctx) {
  // W(n, k) = b[k * ldb + n]: b read in place.
  if (onednn::matmul(b, 1, ldb, a, k, y, ldy, m, n, k, ctx)) return;
  const std::lock_guard blas(blas_mutex());  // Note [OpenBLAS is not reentrant]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0F, a, static_cast<blasint>(k), b,
              static_cast<blasint>(ldb), 0.0F, y, static_cast<blasint>(ldy));
}

}  // namespace

void conv2d(const ArgBlock& args, KernelContext& ctx) {
  if (onednn::conv2d(args, ctx)) return;
  const TensorArg& xt = args.tensors[0];
  const TensorArg& wt = args.tensors[1];
  const TensorArg& bt = args.tensors[2];
  const TensorArg& out = args.tensors[3];
  Conv p{};
  p.n = xt.sizes[0];
  p.c = xt.sizes[1];
  p.h = xt.sizes[2];
  p.w = xt.sizes[3];
  p.o = wt.sizes[0];
  p.kh = wt.sizes[2];
  p.kw = wt.sizes[3];
  p.oh = out.sizes[2];
  p.ow = out.sizes[3];
  p.sh = args.scalars[0].i;
  p.sw = args.scalars[1].i;
  p.ph = args.scalars[2].i;
  p.pw = args.scalars[3].i;
  p.dh = args.scalars[4].i;
  p.dw = args.scalars[5].i;
  p.groups = args.scalars[6].i;
  p.cg = p.c / p.groups;
  p.og = p.o / p.groups;
  const FinishFn fin = finisher(args.scalars[7].i);

  thread_local std::vector<float> x_scratch, w_scratch, col, plane_scratch;
  const float* x = dense(xt, x_scratch);
  const float* w = dense(wt, w_scratch);
  const float* bias = bt.ptr<float>();
  const std::int64_t bias_stride = bt.strides[0];
  auto* y0 = out.ptr<float>();

  const std::int64_t in_plane = p.h * p.w;
  const std::int64_t plane = p.oh * p.ow;
  const std::int64_t k = p.cg * p.kh * p.kw;
  // Each output plane one dense run: write in place, rows of a GEMM at the channel stride.
  const bool direct = (out.strides[3] == 1 || p.ow == 1) && (out.strides[2] == p.ow || p.oh == 1) &&
                      (out.strides[1] >= plane || p.og == 1);
  const std::int64_t ldy = direct && p.og > 1 ? out.strides[1] : plane;
  if (!direct) plane_scratch.resize(static_cast<std::size_t>(p.og * plane));

  // Bias and activation over the group's rows, then (when not direct) the
  // scatter into the strided output.
  const auto finish_group = [&](float* y, std::int64_t img, std::int64_t o0, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t o = o0 + r;
      float* row = y + r * ldy;
      fin(row, plane, bias[o * bias_stride]);
      if (direct) continue;
      float* dst = y0 + img * out.strides[0] + o * out.strides[1];
      for (std::int64_t i = 0; i < p.oh; ++i) {
        for (std::int64_t j = 0; j < p.ow; ++j)
          dst[i * out.strides[2] + j * out.strides[3]] = row[i * p.ow + j];
      }
    }
  };
  const auto target = [&](std::int64_t img, std::int64_t o0) {
    return direct ? y0 + img * out.strides[0] + o0 * out.strides[1] : plane_scratch.data();
  };

  if (p.groups == p.c && p.cg == 1) {  // depthwise
    for (std::int64_t img = 0; img < p.n; ++img) {
      for (std::int64_t o = 0; o < p.o; ++o) {
        const std::int64_t c = o / p.og;
        float* y = target(img, o);
        depthwise_plane(x + (img * p.c + c) * in_plane, w + o * p.kh * p.kw, p, y);
        finish_group(y, img, o, 1);
      }
    }
    return;
  }

  keep_blas_serial();
  const bool pointwise = p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
  if (!pointwise) col.resize(static_cast<std::size_t>(k * plane));
  for (std::int64_t img = 0; img < p.n; ++img) {
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const float* xg = x + (img * p.c + g * p.cg) * in_plane;
      const float* b = xg;  // 1x1: the input plane is the [C/g, H*W] matrix
      if (!pointwise) {
        im2col(xg, p, col.data());
        b = col.data();
      }
      float* y = target(img, g * p.og);
      sgemm(w + g * p.og * k, b, y, p.og, plane, k, plane, ldy, ctx);
      finish_group(y, img, g * p.og, p.og);
    }
  }
}

}  // namespace sinkgraph::kernels::cpu
