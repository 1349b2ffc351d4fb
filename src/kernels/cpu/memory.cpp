#include <cstring>

#include "common.h"
#include "kernels.h"

namespace sinkgraph::kernels::cpu {

namespace {

template <typename D, typename S>
inline void convert(D* dst, const S* src) {
  if constexpr (std::is_same_v<D, S>) {
    *dst = *src;
  } else {
    store(dst, load(src));
  }
}

// dst[...] = src[...] over dst's shape, src broadcast and converted.
void strided_copy(const TensorArg& dst, const TensorArg& src) {
  if (dst.dtype == src.dtype && dst.is_contiguous() && src.is_contiguous() &&
      dst.numel() == src.numel()) {
    std::memcpy(static_cast<char*>(dst.data) +
                    dst.offset * static_cast<std::int64_t>(dtype_size(dst.dtype)),
                static_cast<const char*>(src.data) +
                    src.offset * static_cast<std::int64_t>(dtype_size(src.dtype)),
                static_cast<std::size_t>(dst.numel()) * dtype_size(dst.dtype));
    return;
  }
  std::int64_t strides[2][kMaxDims] = {};
  broadcast_strides(src, dst.ndim, dst.sizes, strides[0]);
  for (int i = 0; i < dst.ndim; ++i) strides[1][i] = dst.strides[i];
  const std::int64_t base[2] = {src.offset, dst.offset};
  // Note [Coalesced rows], on one thread and in dst's index order (a copy
  // between overlapping views is refused by torch's copy_ and not ours to
  // define); a row of one dtype at unit strides is one memmove.
  std::int64_t sizes[kMaxDims] = {};
  for (int i = 0; i < dst.ndim; ++i) sizes[i] = dst.sizes[i];
  const int nd = coalesce_dims<2>(dst.ndim, sizes, strides);
  dispatch_all(dst.dtype, [&]<typename D>() {
    dispatch_all(src.dtype, [&]<typename S>() {
      const S* ps = static_cast<const S*>(src.data);
      D* pd = static_cast<D*>(dst.data);
      for_each_row<2>(nd, sizes, strides, base,
                      [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                        if constexpr (std::is_same_v<D, S>) {
                          if (st[0] == 1 && st[1] == 1) {  // a row of a permuted or sliced view
                            std::memmove(pd + off[1], ps + off[0],
                                         static_cast<std::size_t>(count) * sizeof(D));
                            return;
                          }
                        }
                        for (std::int64_t i = 0; i < count; ++i) {
                          convert(pd + off[1] + i * st[1], ps + off[0] + i * st[0]);
                        }
                      });
    });
  });
}

}  // namespace

void copy(const ArgBlock& args, KernelContext&) { strided_copy(args.tensors[0], args.tensors[1]); }

void contiguous(const ArgBlock& args, KernelContext&) {
  strided_copy(args.tensors[1], args.tensors[0]);
}

void fill(const ArgBlock& args, KernelContext&) {
  const TensorArg& dst = args.tensors[0];
  const double value = args.scalars[0].f;
  std::int64_t strides[1][kMaxDims] = {};
  for (int i = 0; i < dst.ndim; ++i) strides[0][i] = dst.strides[i];
  const std::int64_t base[1] = {dst.offset};
  dispatch_all(dst.dtype, [&]<typename T>() {
    T* p = static_cast<T*>(dst.data);
    T v{};
    if constexpr (std::is_integral_v<T>) {
      store(&v, static_cast<T>(value));
    } else {
      store(&v, static_cast<float>(value));
    }
    for_each_row<1>(dst.ndim, dst.sizes, strides, base,
                    [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
                      for (std::int64_t i = 0; i < count; ++i) p[off[0] + i * st[0]] = v;
                    });
  });
}

void arange(const ArgBlock& args, KernelContext&) {
  const TensorArg& out = args.tensors[0];
  dispatch_all(out.dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      SG_ASSERT(false, "arange of bool is rejected by the shape function");
    } else {
      T* p = static_cast<T*>(out.data) + out.offset;
      const std::int64_t stride = out.ndim > 0 ? out.strides[0] : 1;
      for (std::int64_t i = 0; i < out.sizes[0]; ++i)
        store(p + i * stride, static_cast<compute_t<T>>(i));
    }
  });
}

void index_copy(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& dst = args.tensors[0];
  const TensorArg& src = args.tensors[1];
  const std::int64_t index = args.scalars[0].i;
  const std::int64_t rows = src.sizes[0];
  if (index < 0 || index + rows > dst.sizes[0]) {
    ctx.fail("destination rows [" + std::to_string(index) + ", " + std::to_string(index + rows) +
             ") are out of range for a destination of " + std::to_string(dst.sizes[0]) +
             " rows (index must be in [0, " + std::to_string(dst.sizes[0] - rows) + "])");
    return;
  }
  TensorArg window = dst;  // dst[index : index + rows]
  window.sizes[0] = rows;
  window.offset += index * dst.strides[0];
  strided_copy(window, src);
}

// dst[b, index[b], ...] = src[b, ...] for each row b.
void index_copy_rows(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& dst = args.tensors[0];
  const TensorArg& index = args.tensors[1];
  const TensorArg& src = args.tensors[2];
  const std::int64_t rows = dst.sizes[0], cap = dst.sizes[1];
  const auto* pi = index.ptr<std::int64_t>();
  for (std::int64_t b = 0; b < rows; ++b) {
    const std::int64_t i = pi[b * index.strides[0]];
    if (i < 0 || i >= cap) {
      ctx.fail("index " + std::to_string(i) + " of row " + std::to_string(b) +
               " is out of range for a destination of " + std::to_string(cap) +
               " positions (expected 0 <= index < " + std::to_string(cap) + ")");
      return;
    }
  }
  for (std::int64_t b = 0; b < rows; ++b) {
    // dst[b, index[b]] and src[b], each seen as the row's own tensor.
    TensorArg to = src, from = src;
    to.data = dst.data;
    to.offset = dst.offset + b * dst.strides[0] + pi[b * index.strides[0]] * dst.strides[1];
    from.offset = src.offset + b * src.strides[0];
    to.sizes[0] = from.sizes[0] = 1;
    for (int d = 1; d < src.ndim; ++d) to.strides[d] = dst.strides[d + 1];
    strided_copy(to, from);
  }
}

}  // namespace sinkgraph::kernels::cpu
