#pragma once
// A Llama-architecture decoder (RMSNorm, grouped-query attention with RoPE,
// SwiGLU), written once against Tensor, SymInt and ops:: and mode-agnostic,
// plus its checkpoint readers and writers (docs/model.md).
//
// Compiled as two functions (the Llama contract in DESIGN.md):
//   prefill(tokens[P], pos0, kv_cache) -> logits[P, vocab]   P dynamic: a key per length
//   decode(token[1], pos, kv_cache)     -> logits[1, vocab]   pos updatable: one capture
// The KV cache is one `mutated` tensor [n_layers, 2, max_seq_len, n_kv_heads, head_size].
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkgraph/export.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"
#include "sinkgraph/trace.h"

namespace sinkgraph::models {

struct SG_API LlamaConfig {
  std::int64_t dim = 288;
  std::int64_t hidden_dim = 768;
  std::int64_t n_layers = 6;
  std::int64_t n_heads = 6;
  std::int64_t n_kv_heads = 6;
  std::int64_t vocab_size = 32000;
  std::int64_t max_seq_len = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  ops::RopeStyle rope_style = ops::RopeStyle::interleaved;
  bool shared_classifier = true;  // output.weight is the token embedding

  [[nodiscard]] std::int64_t head_size() const { return dim / n_heads; }
  [[nodiscard]] std::int64_t kv_dim() const { return head_size() * n_kv_heads; }
  // Throws sinkgraph::Error naming `source` for absurd or inconsistent values.
  void validate(const std::string& source) const;
  // Weights (values) the model holds; the classifier counts once when shared.
  // Call on a validated config (validate() bounds every factor, so no overflow).
  [[nodiscard]] std::int64_t num_parameters() const;
  [[nodiscard]] std::string str() const;
};

struct LlamaLayer {
  Tensor attention_norm;  // [dim]
  Tensor wq, wk, wv, wo;  // [dim, dim], [kv_dim, dim], [kv_dim, dim], [dim, dim]
  Tensor ffn_norm;        // [dim]
  Tensor w1, w2, w3;      // [hidden, dim], [dim, hidden], [hidden, dim]
};

struct LlamaWeights {
  Tensor tok_embeddings;  // [vocab, dim]
  std::vector<LlamaLayer> layers;
  Tensor norm;    // [dim]
  Tensor output;  // [vocab, dim]; the embedding when shared
};

class SG_API LlamaModel {
 public:
  LlamaModel(LlamaConfig config, LlamaWeights weights);

  [[nodiscard]] const LlamaConfig& config() const { return config_; }
  [[nodiscard]] const LlamaWeights& weights() const { return weights_; }

  // The forward pass over `tokens` (i64 [P]) at positions pos0 .. pos0+P-1,
  // writing the KV cache in place; returns logits [P, vocab]. Ordinary model
  // code: eager when called directly, recorded when traced.
  [[nodiscard]] Tensor forward(const Tensor& tokens, const SymInt& pos0,
                               const Tensor& kv_cache) const;
  // A zeroed KV cache for this model: [n_layers, 2, positions, n_kv_heads,
  // head_size], for max_seq_len positions unless fewer are asked for (size it
  // by the work: a prompt plus the steps to generate). forward() reads the
  // number of positions from the cache it is given.
  [[nodiscard]] Tensor new_kv_cache() const;
  [[nodiscard]] Tensor new_kv_cache(std::int64_t positions) const;
  // forward() as a TracedFn over (tokens, pos0 SymInt, kv_cache).
  [[nodiscard]] TracedFn as_function() const;
  // Every weight by its checkpoint name ("layers.0.attention.wq.weight"), as
  // the tensors the model holds: compile() guards each traced param on them
  // (TraceOptions::parameters).
  [[nodiscard]] NamedTensors named_parameters() const;

 private:
  LlamaConfig config_;
  LlamaWeights weights_;
};

// The built-in default model (DESIGN.md): dim 288, 6 layers, 6 heads, 6 kv
// heads, hidden 768, vocab 32000, seq_len 256, random weights from seed 0.
SG_API LlamaConfig builtin_config();
SG_API LlamaModel random_model(const LlamaConfig& config, std::uint64_t seed);

// Checkpoints. load_model() picks the reader: a file ending in .safetensors
// (with config.json beside it), a folder holding model.safetensors and
// config.json, or a llama2.c .bin file. Every problem (truncated file, sizes
// that disagree with the header or config, absurd dimensions, a missing or
// misshapen tensor) is a sinkgraph::Error naming the file and the tensor.
SG_API LlamaModel load_model(const std::string& path);
SG_API LlamaModel load_llama2c(const std::string& path);
SG_API LlamaModel load_safetensors(const std::string& path, const std::string& config_path);
// Parsers over bytes already in memory (what the loaders and fuzzers call).
SG_API LlamaModel parse_llama2c(std::span<const std::uint8_t> bytes, const std::string& name);
SG_API LlamaModel parse_safetensors(std::span<const std::uint8_t> bytes,
                                    const std::string& config_json, const std::string& name);

enum class CheckpointFormat : std::uint8_t { llama2c, safetensors };
// Writes `model` at `path` (safetensors: also config.json beside it).
SG_API void save_model(const LlamaModel& model, const std::string& path, CheckpointFormat format,
                       DType dtype = DType::f32);

}  // namespace sinkgraph::models
