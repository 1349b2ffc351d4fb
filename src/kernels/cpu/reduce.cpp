// Reductions: mean over a set of dimensions.
#include <vector>

#include "common.h"
#include "kernels.h"

namespace sinkgraph::kernels::cpu {

namespace {
// Sums side by side in mean's inner loop over adjacent values.
constexpr std::int64_t kLanes = 8;
}  // namespace

// tensors (x, out); scalars (mask: i, keepdim: i) (Note [Kernel scalars]):
// bit d of mask set when x's dimension d is reduced. Sums in double, divides
// by the count, rounds once to the output dtype; an empty reduction is 0/0,
// NaN, as in PyTorch.
void mean(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& out = args.tensors[1];
  const auto mask = static_cast<std::uint64_t>(args.scalars[0].i);
  const bool keepdim = args.scalars[1].i != 0;
  // Kept dims (with their output strides) and reduced dims, in x's order.
  std::int64_t kept_sizes[kMaxDims] = {}, kept_x[kMaxDims] = {}, kept_out[kMaxDims] = {};
  std::int64_t red_sizes[kMaxDims] = {}, red_x[kMaxDims] = {};
  int nkept = 0, nred = 0, od = 0;
  std::int64_t count = 1;
  for (int d = 0; d < x.ndim; ++d) {
    if ((mask >> d) & 1U) {
      // Adjacent reduced dims that step as one merge: a longer inner loop.
      if (nred > 0 && red_x[nred - 1] == x.strides[d] * x.sizes[d]) {
        red_sizes[nred - 1] *= x.sizes[d];
        red_x[nred - 1] = x.strides[d];
      } else {
        red_sizes[nred] = x.sizes[d];
        red_x[nred++] = x.strides[d];
      }
      count *= x.sizes[d];
      if (keepdim) ++od;
    } else {
      kept_sizes[nkept] = x.sizes[d];
      kept_x[nkept] = x.strides[d];
      kept_out[nkept++] = out.strides[od++];
    }
  }
  std::int64_t outputs = 1;
  for (int i = 0; i < nkept; ++i) outputs *= kept_sizes[i];
  std::int64_t inner_total = 1;
  for (int i = 0; i < nred; ++i) inner_total *= red_sizes[i];
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data) + x.offset;
    T* po = static_cast<T*>(out.data) + out.offset;
    const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(count, 1));
    parallel_for(ctx, outputs, grain, [&](std::int64_t begin, std::int64_t end) {
      // The first output's index over the kept dims, then an odometer: a
      // division per kept dim per output cost more than a short reduction
      // (attention weights averaged over 4 heads: 4 adds per output).
      std::int64_t kept_index[kMaxDims] = {};
      std::int64_t xo = 0, oo = 0;
      for (std::int64_t i = nkept - 1, f = begin; i >= 0; --i) {
        kept_index[i] = f % kept_sizes[i];
        f /= kept_sizes[i];
        xo += kept_index[i] * kept_x[i];
        oo += kept_index[i] * kept_out[i];
      }
      for (std::int64_t flat = begin; flat < end; ++flat) {
        double acc = 0.0;
        if (nred == 0) {
          acc = load(px + xo);
        } else {
          // Odometer over the reduced dims; the last one is the inner loop.
          const std::int64_t last = red_sizes[nred - 1];
          const std::int64_t step = red_x[nred - 1];
          std::int64_t index[kMaxDims] = {};
          std::int64_t off = xo;
          for (std::int64_t r = 0; r < inner_total / std::max<std::int64_t>(last, 1); ++r) {
            const T* p = px + off;
            std::int64_t i = 0;
            if (step == 1 && last >= 2 * kLanes) {
              // Adjacent values: kLanes sums side by side (one chain of
              // double additions ran at its latency, 4 cycles a value:
              // 4.9% of efficientnet_b0's call in its global poolings),
              // added up in a fixed order, so the result depends on the
              // shape alone.
              double lane[kLanes] = {};
              for (; i + kLanes <= last; i += kLanes) {
                for (std::int64_t j = 0; j < kLanes; ++j)
                  lane[j] += static_cast<double>(load(p + i + j));
              }
              for (const double l : lane) acc += l;
            }
            for (; i < last; ++i) acc += static_cast<double>(load(p + i * step));
            for (int d = nred - 2; d >= 0; --d) {
              off += red_x[d];
              if (++index[d] < red_sizes[d]) break;
              off -= red_x[d] * red_sizes[d];
              index[d] = 0;
            }
          }
        }
        store(po + oo, static_cast<float>(acc / static_cast<double>(count)));
        for (std::int64_t i = nkept - 1; i >= 0; --i) {  // the next output
          xo += kept_x[i];
          oo += kept_out[i];
          if (++kept_index[i] < kept_sizes[i]) break;
          xo -= kept_x[i] * kept_sizes[i];
          oo -= kept_out[i] * kept_sizes[i];
          kept_index[i] = 0;
        }
      }
    });
  });
}

}  // namespace sinkgraph::kernels::cpu
