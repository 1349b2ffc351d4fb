// Quantized weights in the model (Note [Quantized weights] in
// include/sinkgraph/ops.h): quantize_model, dequantize_model and the format
// of a quantized matrix.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/checkpoint_common.h"
#include "models/gguf.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/ops.h"

namespace sinkgraph::models {
namespace {

detail::GgmlType ggml_type(ops::QuantFormat f) {
  return f == ops::QuantFormat::q8_0 ? detail::GgmlType::q8_0 : detail::GgmlType::q4_0;
}

}  // namespace

ops::QuantFormat quantized_format(const Tensor& w, std::int64_t cols, const std::string& name) {
  SG_CHECK(w.dtype() == DType::u8 && w.ndim() == 2, name, ": a quantized weight is u8 [rows, ",
           "bytes], not ", w.str());
  const std::int64_t width = w.shape()[1];
  SG_CHECK(cols > 0 && cols % ops::kQuantBlockValues == 0, name, ": rows of ", cols,
           " values are not whole blocks of ", ops::kQuantBlockValues);
  for (const auto f : {ops::QuantFormat::q8_0, ops::QuantFormat::q4_0}) {
    if (width == cols / ops::kQuantBlockValues * ops::quant_block_bytes(f)) return f;
  }
  SG_CHECK(false, name, ": rows of ", width, " bytes are neither ", cols, " values of q8_0 (",
           cols / ops::kQuantBlockValues * 34, " bytes) nor of q4_0 (",
           cols / ops::kQuantBlockValues * 18, " bytes)");
  return ops::QuantFormat::q8_0;
}

bool is_quantized(const LlamaModel& model) {
  return std::ranges::any_of(model.named_parameters(),
                             [](const auto& named) { return named.second->dtype() == DType::u8; });
}

namespace {

// The rows of each matrix: (tensor, values per row) for every weight matrix.
std::vector<std::pair<Tensor*, std::int64_t>> matrices(LlamaWeights& w, const LlamaConfig& c) {
  std::vector<std::pair<Tensor*, std::int64_t>> out{{&w.tok_embeddings, c.dim}};
  for (auto& l : w.layers) {
    for (auto* m : {&l.wq, &l.wk, &l.wv, &l.w1, &l.w3}) out.emplace_back(m, c.dim);
    // wo's rows hold the attention heads' values (wq's rows) and w2's the
    // hidden units (w1's rows): a tensor-parallel shard's share of them.
    out.emplace_back(&l.wo, l.wq.shape()[0]);
    out.emplace_back(&l.w2, l.w1.shape()[0]);
  }
  if (!w.output.shares_storage(w.tok_embeddings)) out.emplace_back(&w.output, c.dim);
  return out;
}

}  // namespace

LlamaModel quantize_model(const LlamaModel& model, ops::QuantFormat format) {
  const LlamaConfig& c = model.config();
  LlamaWeights w = model.weights();  // tensors shared with `model` until replaced
  const bool shared = w.output.shares_storage(w.tok_embeddings);
  for (auto [t, cols] : matrices(w, c)) {
    if (!t->defined() || t->dtype() == DType::u8 || cols % ops::kQuantBlockValues != 0) continue;
    const std::vector<float> values = t->to_floats();
    std::vector<std::uint8_t> bytes;
    detail::quantize_blocks(ggml_type(format), values, bytes);
    const std::int64_t rows = t->shape()[0];
    const std::int64_t width = static_cast<std::int64_t>(bytes.size()) / rows;
    *t = detail::bytes_to_tensor(bytes, {rows, width});
  }
  if (shared) w.output = w.tok_embeddings;
  return LlamaModel(c, std::move(w), model.tensor_parallel());
}

LlamaModel dequantize_model(const LlamaModel& model) {
  if (!is_quantized(model)) return model;
  const LlamaConfig& c = model.config();
  LlamaWeights w = model.weights();
  const bool shared = w.output.shares_storage(w.tok_embeddings);
  for (auto [t, cols] : matrices(w, c)) {
    if (!t->defined() || t->dtype() != DType::u8) continue;
    const ops::QuantFormat f = quantized_format(*t, cols, "dequantize_model");
    const std::vector<std::uint8_t> bytes = detail::tensor_to_bytes(*t);
    std::vector<float> values(static_cast<std::size_t>(t->shape()[0] * cols));
    detail::dequantize_blocks(ggml_type(f), bytes, values, "dequantize_model");
    *t = Tensor::from_floats(values, {t->shape()[0], cols});
  }
  if (shared) w.output = w.tok_embeddings;
  return LlamaModel(c, std::move(w), model.tensor_parallel());
}

}  // namespace sinkgraph::models
