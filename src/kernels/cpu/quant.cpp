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

// linear_q's buffers: the rows of x quantized, their scales and offsets,
// and the copy of a strided row of x.
struct Scratch {
  std::vector<std::int8_t> xq;
  std::vector<float> xs;
  std::vector<std::int32_t> offsets;
  std::vector<quant::QuantizedRow> rows;
  std::vector<float*> os;
  std::vector<float> x_copy;
};

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
  // The calling thread's buffers, grown to the largest call and kept: a
  // decode step runs this kernel for every weight matrix, and allocating
  // its few kilobytes each time put malloc and free at 4% of the samples
  // of a stories260K Q4_0 run (`perf`, 500 tokens). A thread (a stream's
  // worker) runs one kernel at a time, and the compute threads only read
  // what it wrote before the split.
  thread_local Scratch sc;
  const auto size = [](auto& v, std::int64_t count) {
    if (v.size() < static_cast<std::size_t>(count)) v.resize(static_cast<std::size_t>(count));
    return v.data();
  };
  std::int8_t* xq = size(sc.xq, m * k);
  float* xs = size(sc.xs, m * blocks);  // the blocks' scales
  // Q4_0's (Note [Q4_0's nibbles as they are])
  std::int32_t* offsets =
      format == quant::Format::q4_0 ? size(sc.offsets, m * blocks * 8) : nullptr;
  quant::QuantizedRow* rows = size(sc.rows, m);
  float** os = size(sc.os, m);
  const std::int64_t xk = x.strides[x.ndim - 1];
  const std::int64_t ok = out.strides[out.ndim - 1];
  float* x_copy = xk != 1 ? size(sc.x_copy, k) : nullptr;
  // A strided output (rare: a transposed view) is written through a copy
  // allocated here, not kept: it is m * n floats, a whole prefill's logits.
  std::vector<float> out_rows(ok != 1 ? static_cast<std::size_t>(m * n) : 0);
  float* out_copy = out_rows.data();
  for (std::int64_t i = 0; i < m; ++i) {
    const float* row = xd + row_offset(x, i);
    if (xk != 1) {
      for (std::int64_t j = 0; j < k; ++j) x_copy[j] = row[j * xk];
      row = x_copy;
    }
    std::int8_t* q = xq + i * k;
    float* d = xs + i * blocks;
    std::int32_t* offset = offsets == nullptr ? nullptr : offsets + i * blocks * 8;
    quant::quantize_row(row, k, q, d, offset);
    rows[i] = {q, d, offset};
    os[i] = ok != 1 ? out_copy + i * n : od + row_offset(out, i);
  }
  const auto* pw = static_cast<const std::uint8_t*>(w.data) + w.offset;
  parallel_for(ctx, n, grain_for(m * k), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::uint8_t* row = pw + r * w.strides[0];
      std::int64_t i = 0;
      const auto block = [&]<int R>() {
        float* o_rows[R];
        for (int j = 0; j < R; ++j) o_rows[j] = os[i + j] + r;
        quant::dot_rows<R>(format, row, blocks, rows + i, o_rows);
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
      for (std::int64_t j = 0; j < n; ++j) row[j * ok] = out_copy[i * n + j];
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
