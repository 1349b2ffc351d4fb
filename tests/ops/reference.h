#pragma once
// Naive references for the operator tests, and the helpers the tests share.
//
// The references (namespace sgtest::ref) are plain loops over std::vector with
// explicit shape/stride index math, computed in double and rounded to float
// once. They share no code with the kernels, call no BLAS and include no
// sinkgraph header. The helpers below them (namespace sgtest) bridge to the
// public API: building tensors from host values and comparing results.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"

namespace sgtest::ref {

using Dims = std::vector<std::int64_t>;

inline std::int64_t numel(const Dims& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// Row-major strides of a contiguous tensor of `shape`.
inline Dims row_major(const Dims& shape) {
  Dims s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    s[static_cast<std::size_t>(i)] =
        s[static_cast<std::size_t>(i) + 1] * shape[static_cast<std::size_t>(i) + 1];
  }
  return s;
}

// The multi-index of flat (row-major) position `flat` in `shape`.
inline Dims unravel(std::int64_t flat, const Dims& shape) {
  Dims idx(shape.size(), 0);
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    idx[u] = flat % shape[u];
    flat /= shape[u];
  }
  return idx;
}

// Element `idx` of a tensor with `strides` and `offset` (in elements).
inline std::int64_t locate(const Dims& idx, const Dims& strides, std::int64_t offset) {
  std::int64_t at = offset;
  for (std::size_t i = 0; i < idx.size(); ++i) at += idx[i] * strides[i];
  return at;
}

// Values of the strided view (shape, strides, offset) over `base`, row-major.
template <typename T>
std::vector<T> gather(const std::vector<T>& base, const Dims& shape, const Dims& strides,
                      std::int64_t offset) {
  std::vector<T> out(static_cast<std::size_t>(numel(shape)));
  for (std::size_t f = 0; f < out.size(); ++f) {
    out[f] = base[static_cast<std::size_t>(
        locate(unravel(static_cast<std::int64_t>(f), shape), strides, offset))];
  }
  return out;
}

// out[i0, ..] = x[i_perm...]: out dimension i is x's dimension perm[i].
template <typename T>
std::vector<T> permute(const std::vector<T>& x, const Dims& shape, const Dims& perm) {
  const Dims xs = row_major(shape);
  Dims os, ost;
  for (const auto p : perm) {
    os.push_back(shape[static_cast<std::size_t>(p)]);
    ost.push_back(xs[static_cast<std::size_t>(p)]);
  }
  return gather(x, os, ost, 0);
}

inline Dims permuted(const Dims& shape, const Dims& perm) {
  Dims out;
  for (const auto p : perm) out.push_back(shape[static_cast<std::size_t>(p)]);
  return out;
}

// x[..., start:end:step, ...] along `dim` (start, end already non-negative).
template <typename T>
std::vector<T> slice(const std::vector<T>& x, const Dims& shape, int dim, std::int64_t start,
                     std::int64_t end, std::int64_t step) {
  Dims os = shape;
  os[static_cast<std::size_t>(dim)] = (end - start + step - 1) / step;
  std::vector<T> out(static_cast<std::size_t>(numel(os)));
  const Dims xs = row_major(shape);
  for (std::size_t f = 0; f < out.size(); ++f) {
    Dims idx = unravel(static_cast<std::int64_t>(f), os);
    idx[static_cast<std::size_t>(dim)] = start + idx[static_cast<std::size_t>(dim)] * step;
    out[f] = x[static_cast<std::size_t>(locate(idx, xs, 0))];
  }
  return out;
}

inline Dims broadcast(const Dims& a, const Dims& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Dims out(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const std::int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Flat index into x (shape xs) of output index `idx` under numpy broadcasting.
inline std::int64_t broadcast_index(const Dims& idx, const Dims& xs) {
  std::int64_t at = 0;
  const std::size_t off = idx.size() - xs.size();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    at = at * xs[i] + (xs[i] == 1 ? 0 : idx[i + off]);
  }
  return at;
}

template <typename T, typename Op>
std::vector<T> binary(const std::vector<T>& a, const Dims& as, const std::vector<T>& b,
                      const Dims& bs, Op op) {
  const Dims os = broadcast(as, bs);
  std::vector<T> out(static_cast<std::size_t>(numel(os)));
  for (std::size_t f = 0; f < out.size(); ++f) {
    const Dims idx = unravel(static_cast<std::int64_t>(f), os);
    out[f] = op(a[static_cast<std::size_t>(broadcast_index(idx, as))],
                b[static_cast<std::size_t>(broadcast_index(idx, bs))]);
  }
  return out;
}

inline std::vector<float> unary(const std::vector<float>& x,
                                const std::function<double(double)>& f) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(f(x[i]));
  return out;
}

inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// a[B..., M, K] @ b[K, N] or b[B'..., K, N] with b's batch dims 1 or equal.
inline std::vector<float> matmul(const std::vector<float>& a, const Dims& as,
                                 const std::vector<float>& b, const Dims& bs) {
  const std::size_t na = as.size(), nb = bs.size();
  const std::int64_t m = as[na - 2], k = as[na - 1], n = bs[nb - 1];
  Dims batch(as.begin(), as.end() - 2);
  const std::int64_t nbatch = numel(batch);
  std::vector<float> out(static_cast<std::size_t>(nbatch * m * n));
  for (std::int64_t bi = 0; bi < nbatch; ++bi) {
    const Dims idx = unravel(bi, batch);
    std::int64_t boff = 0;  // b's batch offset in matrices
    if (nb > 2) {
      for (std::size_t d = 0; d + 2 < nb; ++d) boff = boff * bs[d] + (bs[d] == 1 ? 0 : idx[d]);
    }
    const float* pa = a.data() + bi * m * k;
    const float* pb = b.data() + boff * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (std::int64_t p = 0; p < k; ++p) acc += double(pa[i * k + p]) * double(pb[p * n + j]);
        out[static_cast<std::size_t>((bi * m + i) * n + j)] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

// x[..., K] @ w[N, K]^T over the rows of x (the product of its leading dims).
inline std::vector<float> linear(const std::vector<float>& x, const Dims& x_shape,
                                 const std::vector<float>& w, std::int64_t n) {
  const std::int64_t k = x_shape.back();
  const std::int64_t rows = numel(Dims(x_shape.begin(), x_shape.end() - 1));
  std::vector<float> out(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        acc += double(x[static_cast<std::size_t>(r * k + p)]) *
               double(w[static_cast<std::size_t>(j * k + p)]);
      }
      out[static_cast<std::size_t>(r * n + j)] = static_cast<float>(acc);
    }
  }
  return out;
}

// Row-wise over the last dimension (size n) of contiguous x.
inline std::vector<float> softmax(const std::vector<float>& x, std::int64_t n) {
  std::vector<float> out(x.size());
  for (std::size_t r = 0; r + static_cast<std::size_t>(n) <= x.size() && n > 0;
       r += static_cast<std::size_t>(n)) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < n; ++i)
      mx = std::max(mx, double(x[r + static_cast<std::size_t>(i)]));
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i)
      sum += std::exp(double(x[r + static_cast<std::size_t>(i)]) - mx);
    for (std::int64_t i = 0; i < n; ++i) {
      out[r + static_cast<std::size_t>(i)] =
          static_cast<float>(std::exp(double(x[r + static_cast<std::size_t>(i)]) - mx) / sum);
    }
  }
  return out;
}

inline std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w,
                                   double eps) {
  const std::size_t n = w.size();
  std::vector<float> out(x.size());
  for (std::size_t r = 0; r < x.size(); r += n) {
    double ss = 0.0;
    for (std::size_t i = 0; i < n; ++i) ss += double(x[r + i]) * double(x[r + i]);
    const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
    for (std::size_t i = 0; i < n; ++i)
      out[r + i] = static_cast<float>(double(x[r + i]) * scale * double(w[i]));
  }
  return out;
}

inline std::vector<float> layer_norm(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, double eps) {
  const std::size_t n = w.size();
  std::vector<float> out(x.size());
  for (std::size_t r = 0; r < x.size(); r += n) {
    double mean = 0.0;
    for (std::size_t i = 0; i < n; ++i) mean += x[r + i];
    mean /= double(n);
    double var = 0.0;
    for (std::size_t i = 0; i < n; ++i) var += (x[r + i] - mean) * (x[r + i] - mean);
    var /= double(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::size_t i = 0; i < n; ++i) {
      out[r + i] = static_cast<float>((x[r + i] - mean) * inv * double(w[i]) + double(b[i]));
    }
  }
  return out;
}

// x[T, H, D]; angle(t, i) = (pos0 + t) * theta^(-2i/D). interleaved rotates
// (2i, 2i+1); half rotates (i, i + D/2).
inline std::vector<float> rope(const std::vector<float>& x, std::int64_t t_len, std::int64_t heads,
                               std::int64_t d, std::int64_t pos0, double theta, bool half) {
  std::vector<float> out(x.size());
  for (std::int64_t t = 0; t < t_len; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t row = (t * heads + h) * d;
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const double angle = double(pos0 + t) * std::pow(theta, -2.0 * double(i) / double(d));
        const std::int64_t i0 = half ? i : 2 * i;
        const std::int64_t i1 = half ? i + d / 2 : 2 * i + 1;
        const double a = x[static_cast<std::size_t>(row + i0)];
        const double b = x[static_cast<std::size_t>(row + i1)];
        out[static_cast<std::size_t>(row + i0)] =
            static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
        out[static_cast<std::size_t>(row + i1)] =
            static_cast<float>(a * std::sin(angle) + b * std::cos(angle));
      }
    }
  }
  return out;
}

inline std::vector<float> embedding(const std::vector<float>& w, std::int64_t d,
                                    const std::vector<std::int64_t>& ids) {
  std::vector<float> out;
  for (const auto id : ids) {
    for (std::int64_t c = 0; c < d; ++c) out.push_back(w[static_cast<std::size_t>(id * d + c)]);
  }
  return out;
}

// q[T, Hq, D]; k, v[S, Hkv, D]; query t sees positions j <= seq_len - T + t.
inline std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, std::int64_t t_len,
                                    std::int64_t hq, std::int64_t hkv, std::int64_t d,
                                    std::int64_t seq_len, double scale) {
  std::vector<float> out(q.size());
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  for (std::int64_t t = 0; t < t_len; ++t) {
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kh = h / (hq / hkv);
      const std::int64_t last = seq_len - t_len + t;  // inclusive
      std::vector<double> s(static_cast<std::size_t>(last + 1));
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          dot += double(q[at((t * hq + h) * d + c)]) * double(k[at((j * hkv + kh) * d + c)]);
        }
        s[at(j)] = dot * scale;
        mx = std::max(mx, s[at(j)]);
      }
      double sum = 0.0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (std::int64_t c = 0; c < d; ++c) {
        double acc = 0.0;
        for (std::int64_t j = 0; j <= last; ++j)
          acc += s[at(j)] * double(v[at((j * hkv + kh) * d + c)]);
        out[at((t * hq + h) * d + c)] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

// Index of the first maximum of each row of size n.
template <typename T>
std::vector<std::int64_t> argmax(const std::vector<T>& x, std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::size_t r = 0; r < x.size(); r += static_cast<std::size_t>(n)) {
    // torch.argmax: the first maximum, a NaN above everything (the first NaN).
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i) {
      const auto v = x[r + static_cast<std::size_t>(i)];
      const auto b = x[r + static_cast<std::size_t>(best)];
      if (b != b) break;  // NaN
      if (v != v || v > b) best = i;
    }
    out.push_back(best);
  }
  return out;
}

// Concatenation of contiguous tensors along `dim`.
// The inverse-CDF draw written out plainly: the first index whose running
// sum of exp((x - max) / t), in double, passes u times the total.
inline std::int64_t sample(const std::vector<float>& row, double t, double u) {
  double best = row[0];
  for (const float v : row) best = std::max(best, static_cast<double>(v));
  std::vector<double> w;
  double total = 0;
  for (const float v : row) total += w.emplace_back(std::exp((v - best) / t));
  double acc = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    acc += w[i];
    if (u * total < acc) return static_cast<std::int64_t>(i);
  }
  return static_cast<std::int64_t>(w.size()) - 1;
}

template <typename T>
std::vector<T> cat(const std::vector<std::vector<T>>& xs, const std::vector<Dims>& shapes,
                   int dim) {
  const auto u = static_cast<std::size_t>(dim);
  Dims os = shapes[0];
  os[u] = 0;
  for (const auto& s : shapes) os[u] += s[u];
  std::vector<T> out(static_cast<std::size_t>(numel(os)));
  for (std::size_t f = 0; f < out.size(); ++f) {
    Dims idx = unravel(static_cast<std::int64_t>(f), os);
    std::size_t which = 0;
    while (idx[u] >= shapes[which][u]) idx[u] -= shapes[which++][u];
    out[f] = xs[which][static_cast<std::size_t>(locate(idx, row_major(shapes[which]), 0))];
  }
  return out;
}

// conv2d over contiguous x[N, C, H, W], w[O, C/groups, KH, KW], b[O]: the
// seven loops, in double; `act` (when set) after the bias.
struct Conv2dArgs {
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};
inline Dims conv2d_shape(const Dims& xs, const Dims& ws, const Conv2dArgs& a) {
  return {xs[0], ws[0], (xs[2] + 2 * a.ph - a.dh * (ws[2] - 1) - 1) / a.sh + 1,
          (xs[3] + 2 * a.pw - a.dw * (ws[3] - 1) - 1) / a.sw + 1};
}
inline std::vector<float> conv2d(const std::vector<float>& x, const Dims& xs,
                                 const std::vector<float>& w, const Dims& ws,
                                 const std::vector<float>& b, const Conv2dArgs& a,
                                 const std::function<double(double)>& act = {}) {
  const Dims os = conv2d_shape(xs, ws, a);
  const std::int64_t cg = ws[1], og = ws[0] / a.groups;
  std::vector<float> out(static_cast<std::size_t>(numel(os)));
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  for (std::int64_t n = 0; n < os[0]; ++n) {
    for (std::int64_t o = 0; o < os[1]; ++o) {
      const std::int64_t g = o / og;
      for (std::int64_t oh = 0; oh < os[2]; ++oh) {
        for (std::int64_t ow = 0; ow < os[3]; ++ow) {
          double acc = 0.0;
          for (std::int64_t c = 0; c < cg; ++c) {
            for (std::int64_t i = 0; i < ws[2]; ++i) {
              for (std::int64_t j = 0; j < ws[3]; ++j) {
                const std::int64_t ih = oh * a.sh - a.ph + i * a.dh;
                const std::int64_t iw = ow * a.sw - a.pw + j * a.dw;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                const std::int64_t ic = g * cg + c;
                acc += double(x[at(((n * xs[1] + ic) * xs[2] + ih) * xs[3] + iw)]) *
                       double(w[at(((o * cg + c) * ws[2] + i) * ws[3] + j)]);
              }
            }
          }
          acc += double(b[at(o)]);
          if (act) acc = act(acc);
          out[at(((n * os[1] + o) * os[2] + oh) * os[3] + ow)] = static_cast<float>(acc);
        }
      }
    }
  }
  return out;
}

inline double relu(double x) { return x > 0.0 ? x : 0.0; }
inline double hardswish(double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }

// Inference batch norm over dim 1 of contiguous x[N, C, ...], in double:
// (x - mean) / sqrt(var + eps) * weight + bias.
inline std::vector<float> batch_norm(const std::vector<float>& x, const Dims& xs,
                                     const std::vector<float>& mean, const std::vector<float>& var,
                                     const std::vector<float>& w, const std::vector<float>& b,
                                     double eps) {
  std::int64_t inner = 1;
  for (std::size_t i = 2; i < xs.size(); ++i) inner *= xs[i];
  std::vector<float> out(x.size());
  for (std::size_t f = 0; f < x.size(); ++f) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(f) / inner) % xs[1]);
    out[f] = static_cast<float>(
        (double(x[f]) - mean[c]) / std::sqrt(double(var[c]) + eps) * double(w[c]) + double(b[c]));
  }
  return out;
}

// PyTorch's pooling output size (pooling_output_shape).
inline std::int64_t pool_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                              std::int64_t d, bool ceil_mode) {
  const std::int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  std::int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// max_pool2d over contiguous x[..., H, W] (planes = the leading dims):
// positions outside the input never count; a NaN in a window wins.
struct Pool2dArgs {
  std::int64_t kh, kw, sh, sw, ph = 0, pw = 0, dh = 1, dw = 1;
  bool ceil_mode = false;
};
inline Dims max_pool2d_shape(const Dims& xs, const Pool2dArgs& a) {
  Dims os = xs;
  const std::size_t n = xs.size();
  os[n - 2] = pool_size(xs[n - 2], a.kh, a.sh, a.ph, a.dh, a.ceil_mode);
  os[n - 1] = pool_size(xs[n - 1], a.kw, a.sw, a.pw, a.dw, a.ceil_mode);
  return os;
}
inline std::vector<float> max_pool2d(const std::vector<float>& x, const Dims& xs,
                                     const Pool2dArgs& a) {
  const Dims os = max_pool2d_shape(xs, a);
  const std::size_t n = xs.size();
  const std::int64_t h = xs[n - 2], w = xs[n - 1], oh = os[n - 2], ow = os[n - 1];
  const std::int64_t planes = numel(xs) / (h * w);
  std::vector<float> out(static_cast<std::size_t>(planes * oh * ow));
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t i = 0; i < oh; ++i) {
      for (std::int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::int64_t u = 0; u < a.kh; ++u) {
          for (std::int64_t v = 0; v < a.kw; ++v) {
            const std::int64_t ih = i * a.sh - a.ph + u * a.dh;
            const std::int64_t iw = j * a.sw - a.pw + v * a.dw;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double e = x[static_cast<std::size_t>((p * h + ih) * w + iw)];
            nan = nan || std::isnan(e);
            best = std::max(best, e);
          }
        }
        out[static_cast<std::size_t>((p * oh + i) * ow + j)] =
            nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(best);
      }
    }
  }
  return out;
}

// Mean of contiguous x over the dims marked in `reduced` (one flag per dim),
// in double; the result in row-major order of the kept dims.
inline std::vector<float> mean(const std::vector<float>& x, const Dims& xs,
                               const std::vector<bool>& reduced) {
  Dims os;
  for (std::size_t d = 0; d < xs.size(); ++d) os.push_back(reduced[d] ? 1 : xs[d]);
  std::vector<double> sum(static_cast<std::size_t>(numel(os)), 0.0);
  for (std::size_t f = 0; f < x.size(); ++f) {
    Dims idx = unravel(static_cast<std::int64_t>(f), xs);
    for (std::size_t d = 0; d < xs.size(); ++d) {
      if (reduced[d]) idx[d] = 0;
    }
    sum[static_cast<std::size_t>(locate(idx, row_major(os), 0))] += x[f];
  }
  std::int64_t count = 1;
  for (std::size_t d = 0; d < xs.size(); ++d) count *= reduced[d] ? xs[d] : 1;
  std::vector<float> out(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) out[i] = static_cast<float>(sum[i] / double(count));
  return out;
}

// x (contiguous, shape xs) broadcast to `shape` (torch.expand with concrete sizes).
inline std::vector<float> expand(const std::vector<float>& x, const Dims& xs, const Dims& shape) {
  std::vector<float> out(static_cast<std::size_t>(numel(shape)));
  for (std::size_t f = 0; f < out.size(); ++f) {
    out[f] = x[static_cast<std::size_t>(
        broadcast_index(unravel(static_cast<std::int64_t>(f), shape), xs))];
  }
  return out;
}

}  // namespace sgtest::ref

namespace sgtest {

using ref::Dims;

inline sinkgraph::Shape to_shape(const Dims& d) {
  sinkgraph::Shape s;
  for (const auto v : d) s.push_back(v);
  return s;
}

inline sinkgraph::SymShape to_sym(const Dims& d) {
  sinkgraph::SymShape s;
  for (const auto v : d) s.push_back(sinkgraph::SymInt(v));
  return s;
}

inline Dims dims_of(const sinkgraph::Tensor& t) { return Dims(t.shape().begin(), t.shape().end()); }

inline std::vector<float> random_floats(std::mt19937& rng, std::int64_t n, float lo = -1.0F,
                                        float hi = 1.0F) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<std::int64_t> random_ints(std::mt19937& rng, std::int64_t n, std::int64_t lo,
                                             std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// A tensor of `dtype` holding `values`; `stored` receives the values as the
// tensor holds them (rounded to f16/bf16), which is what references must use.
inline sinkgraph::Tensor make(const std::vector<float>& values, const Dims& shape,
                              sinkgraph::DType dtype = sinkgraph::DType::f32,
                              std::vector<float>* stored = nullptr) {
  sinkgraph::Tensor t = sinkgraph::Tensor::from_floats(values, to_shape(shape), dtype);
  if (stored != nullptr) *stored = t.to_floats();
  return t;
}

inline std::string str(const Dims& d) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < d.size(); ++i) s << (i ? "," : "") << d[i];
  s << "]";
  return s.str();
}

// |got - want| <= atol + rtol * |want| elementwise (NaN matches NaN; infinities
// must match exactly). Reports the count and the first few mismatches.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << want.size();
  }
  std::ostringstream bad;
  std::size_t count = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok = false;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      ok = std::abs(g - w) <= atol + rtol * std::abs(w);
    }
    if (!ok && count++ < 5) bad << "\n  [" << i << "] got " << g << " expected " << w;
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " of " << got.size() << " elements differ (rtol "
                                       << rtol << ", atol " << atol << "):" << bad.str();
}

// Runs `fn`, which must throw sinkgraph::Error; returns its message ("" and a
// test failure otherwise).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const sinkgraph::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected sinkgraph::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected sinkgraph::Error, nothing was thrown";
  return "";
}

inline ::testing::AssertionResult contains_all(const std::string& message,
                                               const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    if (message.find(p) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" does not mention \"" << p << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace sgtest
