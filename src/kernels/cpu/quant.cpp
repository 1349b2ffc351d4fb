// linear_q and embedding_q (Note [Quantized weights] in include/sinkgraph/ops.h).
#include "quant.h"

#include <string>
#include <vector>

#include "common.h"
#include "kernels.h"

namespace sinkgraph::kernels::cpu {

namespace {

quant::Format format_of(const ArgBlock& args) {
  return static_cast<quant::Format>(args.scalars[0].i);
}

// The offset of row i of `t` over its last dimension (its leading
// dimensions decomposed).
std::int64_t row_offset(const TensorArg& t, std::int64_t i) {
  std::int64_t off = t.offset;
  for (int d = t.ndim - 2; d >= 0; --d) {
    off += (i % t.sizes[d]) * t.strides[d];
    i /= t.sizes[d];
  }
  return off;
}

}  // namespace

// Every row of x against every row of w; the rows of w are split across the
// compute threads, each read once for up to four rows of x at a time. The
// rows of x are quantized first, once for all threads (Note [Activations
// quantized per block] in quant.h, and for Q4_0 Note [Q4_0's nibbles as
// they are]); rows of x or out whose values are not
// adjacent (a transposed view) are gathered into (or scattered from)
// contiguous copies.
void linear_q(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& w = args.tensors[1];
  const TensorArg& out = args.tensors[2];
  const quant::Format format = format_of(args);
  const std::int64_t bb = quant::block_bytes(format);
  const std::int64_t blocks = w.sizes[1] / bb;
  const std::int64_t k = blocks * quant::kBlock;
  const std::int64_t n = w.sizes[0];
  const std::int64_t m = x.numel() / k;
  SG_ASSERT(x.dtype == DType::f32 && w.dtype == DType::u8 && w.strides[1] == 1,
            "linear_q: x must be f32 and w u8 with rows of adjacent bytes");
  if (m == 0 || n == 0) return;
  const auto* xd = static_cast<const float*>(x.data);
  auto* od = static_cast<float*>(out.data);
  std::vector<std::int8_t> xq(static_cast<std::size_t>(m * k));
  std::vector<float> xs(static_cast<std::size_t>(m * blocks));  // the blocks' scales
  std::vector<std::int32_t> offsets;  // Q4_0's (Note [Q4_0's nibbles as they are])
  if (format == quant::Format::q4_0) offsets.resize(static_cast<std::size_t>(m * blocks * 8));
  std::vector<quant::QuantizedRow> rows(static_cast<std::size_t>(m));
  std::vector<float*> os(static_cast<std::size_t>(m));
  std::vector<float> x_copy;
  std::vector<float> out_copy;
  const std::int64_t xk = x.strides[x.ndim - 1];
  const std::int64_t ok = out.strides[out.ndim - 1];
  if (xk != 1) x_copy.resize(static_cast<std::size_t>(k));
  if (ok != 1) out_copy.resize(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) {
    const float* row = xd + row_offset(x, i);
    if (xk != 1) {
      for (std::int64_t j = 0; j < k; ++j) x_copy[static_cast<std::size_t>(j)] = row[j * xk];
      row = x_copy.data();
    }
    std::int8_t* q = xq.data() + i * k;
    float* d = xs.data() + i * blocks;
    std::int32_t* offset = offsets.empty() ? nullptr : offsets.data() + i * blocks * 8;
    quant::quantize_row(row, k, q, d, offset);
    rows[static_cast<std::size_t>(i)] = {q, d, offset};
    os[static_cast<std::size_t>(i)] = ok != 1 ? out_copy.data() + i * n : od + row_offset(out, i);
  }
  const auto* pw = static_cast<const std::uint8_t*>(w.data) + w.offset;
  parallel_for(ctx, n, grain_for(m * k), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::uint8_t* row = pw + r * w.strides[0];
      std::int64_t i = 0;
      const auto block = [&]<int R>() {
        float* o_rows[R];
        for (int j = 0; j < R; ++j) o_rows[j] = os[static_cast<std::size_t>(i + j)] + r;
        quant::dot_rows<R>(format, row, blocks, rows.data() + i, o_rows);
        i += R;
      };
      while (i + 4 <= m) block.template operator()<4>();
      if (i + 2 <= m) block.template operator()<2>();
      if (i < m) block.template operator()<1>();
    }
  });
  if (ok != 1) {
    for (std::int64_t i = 0; i < m; ++i) {
      float* row = od + row_offset(out, i);
      for (std::int64_t j = 0; j < n; ++j)
        row[j * ok] = out_copy[static_cast<std::size_t>(i * n + j)];
    }
  }
}

void embedding_q(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& w = args.tensors[0];
  const TensorArg& ids = args.tensors[1];
  const TensorArg& o = args.tensors[2];
  const quant::Format format = format_of(args);
  const std::int64_t bb = quant::block_bytes(format);
  const std::int64_t blocks = w.sizes[1] / bb;
  const std::int64_t oc = o.strides[o.ndim - 1];
  const auto* pw = static_cast<const std::uint8_t*>(w.data) + w.offset;
  auto* po = static_cast<float*>(o.data);
  float values[quant::kBlock];
  for_each_embedding_row(ctx, ids, o, w.sizes[0], [&](std::int64_t id, std::int64_t row) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      quant::dequantize_block(format, pw + id * w.strides[0] + b * bb, values);
      for (std::int64_t j = 0; j < quant::kBlock; ++j)
        po[row + (b * quant::kBlock + j) * oc] = values[j];
    }
  });
}

}  // namespace sinkgraph::kernels::cpu
