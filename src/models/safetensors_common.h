#pragma once
// What the two safetensors layouts share (docs/model.md): our own names with
// our config.json, and Hugging Face's names with HF's config.json, one file
// or shards. Bounded JSON parsing, the checked safetensors header, the
// tensor slots of a Llama model, and the assembly of a model from checked
// entries in one or more files.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sinkgraph/dtype.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/shape.h"

namespace sinkgraph::models::detail {

// ---- JSON ----

// Note [Bounded JSON]: values are parsed at most kMaxJsonDepth deep, keys are
// unique per object (JSON allows duplicates and nlohmann keeps the last: a
// silent choice), and a bad value is quoted by a bounded excerpt, never by
// dumping it whole (a recursive dump of a deep value overflowed the stack).
// The text is JSON and nothing else: a NUL byte anywhere is an error
// (nlohmann's lexer takes one for the end of input, so `}\0garbage` and a
// NUL-padded safetensors header were accepted; the format pads with spaces),
// and so is a leading UTF-8 byte order mark (RFC 8259 forbids writing one;
// nlohmann skipped it, Python's json refuses it, so transformers would not
// load the config we accepted). Whitespace after the value is allowed.
constexpr int kMaxJsonDepth = 64;

// Parses `text` under Note [Bounded JSON]; errors name `source` and `what`
// ("the config", "the header", "the index").
nlohmann::json parse_json(std::string_view text, const std::string& source, const char* what);
// A bounded description of a value for messages: a short scalar, or "an
// array of 3" / "an object of 2 keys".
std::string brief(const nlohmann::json& v);

// A required JSON integer `key` of `j` that fits in int64.
std::int64_t config_int(const nlohmann::json& j, const char* key, const std::string& source);
// An optional JSON number (`fallback` when absent).
double config_number(const nlohmann::json& j, const char* key, double fallback,
                     const std::string& source);

// ---- the safetensors header ----

struct TensorEntry {
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;  // data_offsets, relative to the data section
  std::uint64_t end = 0;
};

// One safetensors file's checked header: every entry has a supported dtype
// (F32, F16, BF16), a shape of at most kMaxDims sizes, and offsets inside the
// data section holding exactly numel * dtype size bytes. `__metadata__` must
// be an object and is otherwise ignored.
struct SafetensorsFile {
  std::string name;                    // the file, for messages
  std::span<const std::uint8_t> data;  // the data section
  std::map<std::string, TensorEntry, std::less<>> entries;
};
SafetensorsFile parse_safetensors_header(std::span<const std::uint8_t> bytes,
                                         const std::string& name);
// The entries cover the data section exactly once, as the format requires: no
// two overlap and no bytes lie between or after them.
void check_coverage(const SafetensorsFile& file);
// The bytes of a safetensors file holding `tensors` in order as `dtype`
// (F32, F16 or BF16), with `metadata` as __metadata__; the header is padded
// with spaces so the data section starts 8-byte aligned.
std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               DType dtype, const nlohmann::json& metadata);
// The safetensors tag of a float dtype ("F32", "F16", "BF16").
const char* safetensors_dtype(DType dtype);

// ---- where tensors go ----

constexpr int kLayerFields = 12;
// A Llama weight: a layer and its field (kFields order: attention_norm, wq,
// wk, wv, wo, ffn_norm, w1, w2, w3, then the biases bq, bk, bv that only a
// config with attention_bias has), or layer -1 and a top-level field (0 the
// token embedding, 1 the final norm, 2 the classifier). `ignored`: a tensor
// the layout allows and the model does not use (HF's rotary inv_freq buffers).
struct Slot {
  std::int64_t layer = -1;
  int field = 0;
  bool ignored = false;
};
Shape slot_shape(const LlamaConfig& c, const Slot& s);
Tensor& slot_tensor(LlamaWeights& w, const Slot& s);
// The LlamaLayer member of a layer slot (shard_slice takes it); null for the
// embedding, final norm and classifier.
Tensor LlamaLayer::*slot_member(const Slot& s);
const Tensor& slot_tensor(const LlamaWeights& w, const Slot& s);
// The layer index of "N.rest" (no sign, no leading zero, below n_layers) and
// the rest after the dot; nullopt otherwise.
std::optional<std::pair<std::int64_t, std::string_view>> parse_layer_prefix(std::string_view name,
                                                                            std::int64_t n_layers);

// A tensor naming scheme: ours ("layers.0.attention.wq.weight") or Hugging
// Face's ("model.layers.0.self_attn.q_proj.weight").
struct Naming {
  // The slot of `name` for config `c`, or nullopt when it is no weight of it.
  std::optional<Slot> (*parse)(std::string_view name, const LlamaConfig& c);
  std::string (*name)(const Slot& s);  // the name of a slot that is not ignored
};
const Naming& our_naming();
const Naming& hf_naming();

// Every weight a model of `c` holds, in the writers' order (embedding, each
// layer's fields, final norm, then the classifier unless shared).
std::vector<Slot> weight_slots(const LlamaConfig& c);

// A checked entry and the file it lies in.
struct Located {
  Slot slot;
  TensorEntry entry;
  const SafetensorsFile* file = nullptr;
};
using TensorMap = std::map<std::string, Located, std::less<>>;

// Adds `file`'s entries to `out`: each name must be a weight of `c` under
// `naming` and have the shape `c` implies (errors name the file and tensor).
void collect_tensors(const SafetensorsFile& file, const LlamaConfig& c, const Naming& naming,
                     TensorMap& out);

// The model from checked entries (`c.shared_classifier` says whether the
// classifier is the embedding): every required tensor must be present (the
// first missing one is named, after `source`), each file's entries must
// cover its data section, then the tensors are decoded. A classifier present
// although shared must equal the embedding.
// With tp.size > 1, only rank tp.rank's shard is decoded (shard_slice).
LlamaModel build_model(const LlamaConfig& c, const TensorMap& tensors, const Naming& naming,
                       const std::vector<const SafetensorsFile*>& files, const std::string& source,
                       const TensorParallel& tp);

// ---- Hugging Face (checkpoint_hf.cpp) ----

// A config.json is Hugging Face's when it has "model_type".
bool is_hf_config(const nlohmann::json& j);
// HF's keys to a LlamaConfig (validated), refusing keys that change the math
// and are not implemented; errors name `source` and the key.
LlamaConfig parse_hf_config(const nlohmann::json& j, const std::string& source);

// A shard's bytes and its name in messages (the path, for files on disk).
struct ShardBytes {
  std::string name;
  std::span<const std::uint8_t> bytes;
};
// Opens shard `file` (a checked plain name from the index; `tensor` is one
// the index puts there, for messages); the bytes must stay alive until
// parse_hf_sharded returns.
using ShardOpener = std::function<ShardBytes(const std::string& file, const std::string& tensor)>;

// A sharded HF checkpoint: `index_json` (model.safetensors.index.json, named
// `index_name` in messages) maps tensors to shard files. The index is checked
// whole (a JSON object with a "weight_map" object of Llama weight names to
// plain file names ending in .safetensors) before any shard is opened; every
// shard's header is checked and agrees with the weight_map before any tensor
// is decoded.
LlamaModel parse_hf_sharded(const LlamaConfig& config, std::string_view index_json,
                            const std::string& index_name, const ShardOpener& open_shard,
                            const TensorParallel& tp = {});

}  // namespace sinkgraph::models::detail
