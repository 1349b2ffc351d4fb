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
  // The q, k and v projections add a bias (Qwen2's attention; the output
  // projection and the feed-forward have none).
  bool attention_bias = false;

  [[nodiscard]] std::int64_t head_size() const { return dim / n_heads; }
  [[nodiscard]] std::int64_t kv_dim() const { return head_size() * n_kv_heads; }
  // Throws sinkgraph::Error naming `source` for absurd or inconsistent values.
  void validate(const std::string& source) const;
  // Weights (values) the model holds; the classifier counts once when shared.
  // Call on a validated config (validate() bounds every factor, so no overflow).
  [[nodiscard]] std::int64_t num_parameters() const;
  [[nodiscard]] std::string str() const;
};

// Tensor parallelism, Megatron's split (Note [Tensor-parallel Llama] in
// llama.cpp): rank `rank` of `size` holds whole heads (n_heads / size query
// heads, n_kv_heads / size kv heads: q/k/v split by output rows), wo and w2
// split by input columns with their partial products summed over process
// group `group` (ops::all_reduce), w1/w3 split by output rows; the
// classifier split by vocabulary rows with its logits gathered
// (ops::all_gather), or replicated; embedding and norms replicated. size 1:
// the whole model, no collective.
enum class ClassifierSplit : std::uint8_t {
  vocab,       // rank r holds rows [r * vocab/size, (r + 1) * vocab/size); one all_gather
  replicated,  // every rank holds the whole classifier; no collective
};
struct TensorParallel {
  std::int64_t group = 0;  // the collective group (dist::Communicator::group())
  std::int64_t rank = 0;
  std::int64_t size = 1;
  ClassifierSplit classifier = ClassifierSplit::vocab;
};

struct LlamaLayer {
  Tensor attention_norm;  // [dim]
  Tensor wq, wk, wv, wo;  // [dim, dim], [kv_dim, dim], [kv_dim, dim], [dim, dim]
  Tensor bq, bk, bv;      // [dim], [kv_dim], [kv_dim] with attention_bias; else undefined
  Tensor ffn_norm;        // [dim]
  Tensor w1, w2, w3;      // [hidden, dim], [dim, hidden], [hidden, dim]
};

struct LlamaWeights {
  Tensor tok_embeddings;  // [vocab, dim]
  std::vector<LlamaLayer> layers;
  Tensor norm;    // [dim]
  Tensor output;  // [vocab, dim]; the embedding when shared (a shard: its rows, a view when shared)
};

class SG_API LlamaModel {
 public:
  // `weights` are the whole model's, or with tp.size > 1 rank tp.rank's
  // shard of them (shard_model); `config` is always the whole model's.
  LlamaModel(LlamaConfig config, LlamaWeights weights, TensorParallel tp = {});

  [[nodiscard]] const LlamaConfig& config() const { return config_; }
  [[nodiscard]] const LlamaWeights& weights() const { return weights_; }
  [[nodiscard]] const TensorParallel& tensor_parallel() const { return tp_; }
  // Bytes of the weights this process holds (a shard's, under tensor
  // parallelism; the shared classifier counted once).
  [[nodiscard]] std::int64_t weight_bytes() const;

  // The forward pass over `tokens` (i64 [P]) at positions pos0 .. pos0+P-1,
  // writing the KV cache in place; returns logits [P, vocab]. Ordinary model
  // code: eager when called directly, recorded when traced.
  [[nodiscard]] Tensor forward(const Tensor& tokens, const SymInt& pos0,
                               const Tensor& kv_cache) const;
  // A zeroed KV cache for this model: [n_layers, 2, positions, n_kv_heads,
  // head_size] (this rank's kv heads under tensor parallelism), for
  // max_seq_len positions unless fewer are asked for (size it by the work: a
  // prompt plus the steps to generate). forward() reads the number of
  // positions from the cache it is given.
  [[nodiscard]] Tensor new_kv_cache() const;
  [[nodiscard]] Tensor new_kv_cache(std::int64_t positions) const;
  // forward() as a TracedFn over (tokens, pos0 SymInt, kv_cache).
  [[nodiscard]] TracedFn as_function() const;
  // Batched decoding (Note [Batched decoding] in llama.cpp): one decode step
  // for B sequences, row b the token tokens[b] (i64 [B]) of the sequence in
  // KV slot b at position pos[b] (i64 [B]), writing that slot's cache in
  // place; returns logits [B, vocab]. The cache has one slot per sequence
  // (new_batched_kv_cache), B <= slots; rows are independent, and each row's
  // logits are bitwise what the same sequence gets as a batch of one.
  [[nodiscard]] Tensor forward_batched(const Tensor& tokens, const Tensor& pos,
                                       const Tensor& kv_cache) const;
  // A zeroed batched KV cache: [slots, n_layers, 2, positions, n_kv_heads,
  // head_size].
  [[nodiscard]] Tensor new_batched_kv_cache(std::int64_t slots, std::int64_t positions) const;
  // forward_batched() as a TracedFn over (tokens, pos, kv_cache), all tensors:
  // one graph key per batch size B, whatever the positions.
  [[nodiscard]] TracedFn as_batched_function() const;
  // Every weight by its checkpoint name ("layers.0.attention.wq.weight"), as
  // the tensors the model holds: compile() guards each traced param on them
  // (TraceOptions::parameters).
  [[nodiscard]] NamedTensors named_parameters() const;
  // Everything forward() bakes into a trace besides the weights' shapes:
  // TraceOptions::cache_key for this model's compiled functions (Note [Saved
  // graphs] in src/compiler/saved_graphs.cpp).
  [[nodiscard]] std::string trace_key() const;

 private:
  LlamaConfig config_;
  LlamaWeights weights_;
  TensorParallel tp_;
};

// Quantized weights (Note [Quantized weights] in include/sinkgraph/ops.h):
// any weight matrix (never a norm or bias) may be a u8 tensor [rows, cols /
// 32 * B] of Q8_0 or Q4_0 blocks instead of f32 [rows, cols]; forward() then
// computes with linear_q / embedding_q, reading the blocks in place.
//
// The format of quantized weight `w` whose rows hold `cols` values (from its
// row width); a sinkgraph::Error naming `name` when the width fits neither.
SG_API ops::QuantFormat quantized_format(const Tensor& w, std::int64_t cols,
                                         const std::string& name);
// True when any weight of `model` is quantized.
SG_API bool is_quantized(const LlamaModel& model);
// The same model with every weight matrix whose rows are whole blocks of 32
// quantized to `format` (ggml's reference quantizers, as the GGUF writer);
// norms, biases and matrices with other rows stay f32 (llama.cpp's
// converter would write those f16: f32 is what they compute in here).
// Weights already quantized are kept as they are.
SG_API LlamaModel quantize_model(const LlamaModel& model, ops::QuantFormat format);
// The same model with every quantized weight dequantized to f32 (d * q).
SG_API LlamaModel dequantize_model(const LlamaModel& model);

// Rank tp.rank's shard of `model` (TensorParallel above): the slices are
// copied, so `model` can be released after. Throws sinkgraph::Error when
// tp.size does not divide n_heads, n_kv_heads and hidden_dim, or for a rank
// outside [0, size).
SG_API LlamaModel shard_model(const LlamaModel& model, const TensorParallel& tp);

// The built-in default model (DESIGN.md): dim 288, 6 layers, 6 heads, 6 kv
// heads, hidden 768, vocab 32000, seq_len 256, random weights from seed 0.
SG_API LlamaConfig builtin_config();
SG_API LlamaModel random_model(const LlamaConfig& config, std::uint64_t seed);

// Checkpoints (docs/model.md). load_model() picks the reader:
// - a folder with config.json and model.safetensors, or with config.json and
//   model.safetensors.index.json plus the shards it lists (Hugging Face only);
// - a file ending in .safetensors, with config.json beside it;
// - a file ending in model.safetensors.index.json, with config.json beside it;
// - a file named *.gguf or starting with "GGUF": a GGUF file;
// - anything else: a llama2.c .bin file.
// A config.json with "model_type" is Hugging Face's (HF keys and tensor
// names, RopeStyle::half); without it, our own layout. Every problem
// (truncated file, sizes that disagree with the header or config, absurd
// dimensions, a missing or misshapen tensor, a config key that changes the
// math and is not implemented, an index that disagrees with its shards) is a
// sinkgraph::Error naming the file and the tensor or key.
//
// With tp.size > 1 every reader returns rank tp.rank's shard (what
// shard_model would cut from the whole model) without ever decoding the
// whole: the files are read and only the shard's rows and columns are
// decoded, so weight_bytes() is the shard's (the files' bytes are held
// until the load returns: Note [Checkpoints are read, not mapped]). A split
// that tp.size does not divide is an error before anything is decoded.
SG_API LlamaModel load_model(const std::string& path, const TensorParallel& tp = {});
SG_API LlamaModel load_llama2c(const std::string& path, const TensorParallel& tp = {});
// `path`: one .safetensors file of either layout (config_path says which).
SG_API LlamaModel load_safetensors(const std::string& path, const std::string& config_path,
                                   const TensorParallel& tp = {});
// A GGUF file (llama.cpp's format, versions 2 and 3): architecture "llama"
// (interleaved rotary layout) or "qwen2" (half-split, attention biases);
// tensors f32, f16, bf16, Q8_0 or Q4_0. A Q8_0 or Q4_0 matrix keeps its
// blocks (a u8 tensor; quantized_format below), except under tensor
// parallelism, where every rank dequantizes its slices to f32. The
// metadata's tokenizer is not read here.
SG_API LlamaModel load_gguf(const std::string& path, const TensorParallel& tp = {});
// Parsers over bytes already in memory (what the loaders and fuzzers call).
SG_API LlamaModel parse_gguf(std::span<const std::uint8_t> bytes, const std::string& name,
                             const TensorParallel& tp = {});
SG_API LlamaModel parse_llama2c(std::span<const std::uint8_t> bytes, const std::string& name,
                                const TensorParallel& tp = {});
SG_API LlamaModel parse_safetensors(std::span<const std::uint8_t> bytes,
                                    const std::string& config_json, const std::string& name,
                                    const TensorParallel& tp = {});

// llama2c: a llama2.c .bin file. safetensors: our layout (model.safetensors
// and config.json). hf: a Hugging Face Llama folder (config.json and
// model.safetensors, or shards with model.safetensors.index.json).
// gguf: a llama.cpp GGUF file (checkpoint_gguf.cpp).
enum class CheckpointFormat : std::uint8_t { llama2c, safetensors, hf, gguf };
// The format load_model(path) reads (it reads config.json to tell
// safetensors from hf); throws sinkgraph::Error as load_model would.
SG_API CheckpointFormat checkpoint_format(const std::string& path);
// Writes `model` at `path`: llama2c a file; safetensors a file (or a folder,
// then model.safetensors in it) with config.json beside it; hf a folder
// (created if missing) as save_hf with one shard.
SG_API void save_model(const LlamaModel& model, const std::string& path, CheckpointFormat format,
                       DType dtype = DType::f32);
// The weights' type in a GGUF file written by save_gguf. Norms and biases
// are always f32; a matrix whose rows are not whole blocks of 32 is written
// f16 when Q8_0 or Q4_0 is asked for (as llama.cpp's converter does).
enum class GgufType : std::uint8_t { f32, f16, bf16, q8_0, q4_0 };
// Writes `model` as one GGUF file: architecture "llama" (q and k rows in the
// interleaved layout), or "qwen2" for a model with attention biases. No
// tokenizer is written (our checkpoints carry none).
SG_API void save_gguf(const LlamaModel& model, const std::string& path,
                      GgufType type = GgufType::f32);
// Writes `model` as a Hugging Face Llama checkpoint in folder `dir` (created
// if missing): config.json, and model.safetensors when `shards` is 1, else
// model-0000k-of-0000N.safetensors files and model.safetensors.index.json.
// An interleaved model's q and k rows are permuted (convert_rope_style) as
// HF's own conversion script does. Shards are written first, config.json
// last; stale files of another sharding of this layout are removed.
SG_API void save_hf(const LlamaModel& model, const std::string& dir, DType dtype = DType::f32,
                    std::int64_t shards = 1);
// The same model with the other rotary convention: the q and k projection
// rows are permuted within each head ((2i, 2i+1) <-> (i, i+D/2)), so that
// `style`'s rotation of the permuted projections equals the old style's
// rotation of the old ones (attention scores are unchanged up to float
// rounding: a dot product over the same pairs in another order). Other
// weights are shared with `model`; returns `model` itself when the style
// already matches.
SG_API LlamaModel convert_rope_style(const LlamaModel& model, ops::RopeStyle style);

}  // namespace sinkgraph::models
