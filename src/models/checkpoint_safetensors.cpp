// safetensors checkpoints with config.json beside them, in our layout or
// Hugging Face's (docs/model.md), and load_model(), which picks the reader
// from the path.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint_common.h"
#include "models/safetensors_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using detail::brief;
using detail::config_int;
using detail::config_number;
using detail::parse_json;

constexpr std::uint64_t kMaxConfigBytes = 1'000'000;
// An index lists every tensor once: a 1000-layer model's is about 1 MB.
constexpr std::uint64_t kMaxIndexBytes = 16'000'000;

// ---- config.json ----

// A config.json of either layout: Hugging Face's when it has "model_type"
// (Note [Which layout]), else ours. The config is validated.
struct ParsedConfig {
  LlamaConfig config;
  bool hf = false;
};

ParsedConfig parse_config(std::string_view text, const std::string& source) {
  const json j = parse_json(text, source, "the config");
  SG_CHECK(j.is_object(), source, ": expected a JSON object, got ", j.type_name());
  if (detail::is_hf_config(j)) return {detail::parse_hf_config(j, source), true};
  // Ours has "dim"; one with Hugging Face's keys but no "model_type" is an
  // HF config missing its architecture, and saying `missing "dim"` would
  // send its owner the wrong way.
  SG_CHECK(j.contains("dim") || !(j.contains("hidden_size") || j.contains("num_hidden_layers")),
           source,
           ": missing \"model_type\": a Hugging Face config names its architecture (\"llama\" or "
           "\"qwen2\" here); without it the file is read as sinkgraph's own layout, which needs "
           "\"dim\"");
  LlamaConfig c;
  c.dim = config_int(j, "dim", source);
  c.hidden_dim = config_int(j, "hidden_dim", source);
  c.n_layers = config_int(j, "n_layers", source);
  c.n_heads = config_int(j, "n_heads", source);
  c.n_kv_heads = config_int(j, "n_kv_heads", source);
  c.vocab_size = config_int(j, "vocab_size", source);
  c.max_seq_len = config_int(j, "max_seq_len", source);
  c.norm_eps = config_number(j, "norm_eps", 1e-5, source);
  c.rope_theta = config_number(j, "rope_theta", 10000.0, source);
  c.rope_style = ops::RopeStyle::interleaved;
  if (j.contains("rope_style")) {
    const json& v = j.at("rope_style");
    const bool ok = v.is_string() && (v == "interleaved" || v == "half");
    SG_CHECK(ok, source, ": \"rope_style\" must be \"interleaved\" or \"half\", got ", brief(v));
    if (v == "half") c.rope_style = ops::RopeStyle::half;
  }
  if (j.contains("attention_bias")) {
    const json& v = j.at("attention_bias");
    SG_CHECK(v.is_boolean(), source, ": \"attention_bias\" must be true or false, got ", brief(v));
    c.attention_bias = v.get<bool>();
  }
  detail::validate_config(c, source);
  return {c, false};
}

std::string config_to_json(const LlamaConfig& c) {
  json j;
  j["dim"] = c.dim;
  j["hidden_dim"] = c.hidden_dim;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["vocab_size"] = c.vocab_size;
  j["max_seq_len"] = c.max_seq_len;
  j["norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_style"] = c.rope_style == ops::RopeStyle::half ? "half" : "interleaved";
  if (c.attention_bias) j["attention_bias"] = true;
  return j.dump(2) + "\n";
}

// One safetensors file of either layout. Every entry is checked (dtype,
// shape, offsets, size, name) before any tensor is allocated, so allocations
// are bounded by the file size.
LlamaModel parse_with_config(std::span<const std::uint8_t> bytes, const ParsedConfig& parsed,
                             const std::string& name, const TensorParallel& tp) {
  LlamaConfig c = parsed.config;
  const detail::Naming& naming = parsed.hf ? detail::hf_naming() : detail::our_naming();
  const detail::SafetensorsFile file = detail::parse_safetensors_header(bytes, name);
  detail::TensorMap tensors;
  detail::collect_tensors(file, c, naming, tensors);
  // Ours: the classifier is shared exactly when output.weight is absent. HF:
  // the config says (tie_word_embeddings).
  if (!parsed.hf) c.shared_classifier = !tensors.contains("output.weight");
  return detail::build_model(c, tensors, naming, {&file}, name, tp);
}

std::string read_config_file(const std::string& path) {
  return sinkgraph::read_text_file(path, kMaxConfigBytes, "config");
}

// Note [Which layout]
// A folder or a .safetensors file comes with a config.json; Hugging Face's
// always has "model_type" (save_pretrained writes it) and ours never does, so
// that key picks the tensor names. A folder whose HF config has no
// model.safetensors but a model.safetensors.index.json is sharded; with both,
// the single file wins, as in transformers.
constexpr const char* kIndexName = "model.safetensors.index.json";

LlamaModel load_sharded(const std::string& index_path, const std::string& config_path,
                        const TensorParallel& tp) {
  const ParsedConfig parsed = parse_config(read_config_file(config_path), config_path);
  SG_CHECK(parsed.hf, index_path, ": a sharded checkpoint needs a Hugging Face config.json (",
           config_path, " has no \"model_type\")");
  const std::string index = sinkgraph::read_text_file(index_path, kMaxIndexBytes, "index");
  const fs::path folder = fs::path(index_path).parent_path();
  std::vector<std::unique_ptr<detail::FileBytes>> shards;
  const detail::ShardOpener open = [&](const std::string& file, const std::string& tensor) {
    const std::string path = (folder / file).string();
    try {
      shards.push_back(std::make_unique<detail::FileBytes>(path));
    } catch (const Error& e) {
      SG_CHECK(false, index_path, ": shard ", file, " (holding tensor ", tensor, "): ", e.what());
    }
    return detail::ShardBytes{path, shards.back()->bytes()};
  };
  return detail::parse_hf_sharded(parsed.config, index, index_path, open, tp);
}

}  // namespace

LlamaModel parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& config_json,
                             const std::string& name, const TensorParallel& tp) {
  return parse_with_config(bytes, parse_config(config_json, name + " (config.json)"), name, tp);
}

LlamaModel load_safetensors(const std::string& path, const std::string& config_path,
                            const TensorParallel& tp) {
  const detail::FileBytes file(path);  // the checkpoint's own problems first
  return parse_with_config(file.bytes(), parse_config(read_config_file(config_path), config_path),
                           path, tp);
}

namespace {

// Each file is opened to learn why it cannot be read (not found, permission
// denied, not a regular file), and the message says what it is for.
void check_readable(const std::string& file, const char* what, const std::string& context) {
  try {
    std::uint64_t size = 0;
    ::close(sinkgraph::open_regular_file(file, size, what));
  } catch (const Error& e) {
    SG_CHECK(false, context, e.what());
  }
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// A GGUF file is known by its first four bytes whatever its name (a
// llama2.c file starts with its dim, which would have to be 1179993927).
bool starts_with_gguf_magic(const std::string& path) {
  std::uint64_t size = 0;
  const int fd = sinkgraph::open_regular_file(path, size, "checkpoint");
  char magic[4] = {};
  const ssize_t n = size >= 4 ? ::pread(fd, magic, 4, 0) : 0;
  ::close(fd);
  return n == 4 && std::string_view(magic, 4) == "GGUF";
}

// The files load_model() reads for `path`.
struct Resolved {
  CheckpointFormat format = CheckpointFormat::llama2c;
  std::string weights;  // model.safetensors, the index, or the .bin file
  std::string config;   // empty for llama2.c
  bool sharded = false;
};

Resolved resolve(const std::string& path) {
  SG_CHECK(!path.empty(), "the model path is empty");
  const auto format_of = [](const std::string& config) {
    const json j = parse_json(read_config_file(config), config, "the config");
    return j.is_object() && detail::is_hf_config(j) ? CheckpointFormat::hf
                                                    : CheckpointFormat::safetensors;
  };
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string model = (fs::path(path) / "model.safetensors").string();
    const std::string config = (fs::path(path) / "config.json").string();
    const std::string index = (fs::path(path) / kIndexName).string();
    const std::string context = path +
                                ": a model folder needs config.json and model.safetensors (or " +
                                kIndexName + " with its shards): ";
    if (!exists(model) && exists(config) && exists(index)) {
      check_readable(config, "config", context);
      return {format_of(config), index, config, true};
    }
    check_readable(model, "checkpoint", context);
    check_readable(config, "config", context);
    return {format_of(config), model, config, false};
  }
  if (path.ends_with(".safetensors")) {
    const std::string config = (fs::path(path).parent_path() / "config.json").string();
    check_readable(config, "config", path + ": needs config.json beside it: ");
    check_readable(path, "checkpoint", "");
    return {format_of(config), path, config, false};
  }
  if (path.ends_with(kIndexName)) {
    const std::string config = (fs::path(path).parent_path() / "config.json").string();
    check_readable(config, "config", path + ": needs config.json beside it: ");
    check_readable(path, "index", "");
    return {format_of(config), path, config, true};
  }
  check_readable(path, "checkpoint", "");
  if (path.ends_with(".gguf") || starts_with_gguf_magic(path))
    return {CheckpointFormat::gguf, path, "", false};
  return {CheckpointFormat::llama2c, path, "", false};
}

}  // namespace

CheckpointFormat checkpoint_format(const std::string& path) { return resolve(path).format; }

LlamaModel load_model(const std::string& path, const TensorParallel& tp) {
  const Resolved r = resolve(path);
  if (r.format == CheckpointFormat::llama2c) return load_llama2c(r.weights, tp);
  if (r.format == CheckpointFormat::gguf) return load_gguf(r.weights, tp);
  if (r.sharded) return load_sharded(r.weights, r.config, tp);
  return load_safetensors(r.weights, r.config, tp);
}

namespace detail {

void save_safetensors(const LlamaModel& model, const std::string& path_in, DType dtype) {
  SG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, path_in,
           ": safetensors checkpoints are written as f32, f16 or bf16, not ", dtype_name(dtype));
  // A folder gets model.safetensors and config.json. So does a new path
  // not named *.safetensors: written as a file, it put config.json in its
  // parent folder, beside (or over) whatever config.json was there.
  std::error_code ec;
  const fs::path out(path_in);
  const bool folder =
      fs::is_directory(out, ec) || (out.extension() != ".safetensors" && !fs::exists(out, ec));
  if (folder) {
    fs::create_directories(out, ec);
    SG_CHECK(!ec, path_in, ": cannot create the folder: ", ec.message());
  }
  const std::string path = folder ? (out / "model.safetensors").string() : path_in;
  const std::string config_path = (fs::path(path).parent_path() / "config.json").string();
  LlamaConfig c = model.config();
  const LlamaWeights& w = model.weights();
  SG_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.n_layers, path, ": the model has ",
           w.layers.size(), " layers but its config says ", c.n_layers);
  c.shared_classifier = classifier_is_shared(w);
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (const Slot& s : weight_slots(c)) {
    const std::string key = our_naming().name(s);
    const Tensor& t = slot_tensor(w, s);
    const Shape want = slot_shape(c, s);
    SG_CHECK(t.defined() && t.shape() == want, path, ": tensor ", key, " is ",
             t.defined() ? t.str() : std::string("undefined"), " but the config needs shape ",
             shape_str(want));
    tensors.emplace_back(key, &t);
  }
  write_file(path, std::string_view(encode_safetensors(tensors, dtype, {{"format", "pt"}})));
  write_file(config_path, std::string_view(config_to_json(c)));
}

}  // namespace detail
}  // namespace sinkgraph::models
