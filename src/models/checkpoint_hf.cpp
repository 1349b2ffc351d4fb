// Hugging Face Llama checkpoints (docs/model.md, "Hugging Face checkpoints"):
// HF's config.json, its sharded layout (model.safetensors.index.json), the
// writer behind `sinkgraph convert --to hf`, and the q/k row permutation
// between the two rotary conventions.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint_common.h"
#include "models/safetensors_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::models {
namespace detail {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// HF's LlamaConfig defaults for the optional keys.
constexpr double kHfNormEps = 1e-6;
constexpr double kHfRopeTheta = 10000.0;

// A key that must be absent, null or false; true refuses with `why`.
void refuse_if_true(const json& j, const char* key, const char* why, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  const json& v = j.at(key);
  SG_CHECK(v.is_boolean(), source, ": \"", key, "\" must be true or false, got ", brief(v));
  SG_CHECK(!v.get<bool>(), source, ": \"", key, "\": true ", why,
           ", which sinkgraph's Llama does not implement");
}

// rope_scaling / rope_parameters: null, or the default rotary embedding.
// Returns the object's rope_theta when it has one (rope_parameters, in
// transformers 5), else `theta`.
double check_rope_object(const json& j, const char* key, double theta, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return theta;
  const json& v = j.at(key);
  SG_CHECK(v.is_object(), source, ": \"", key, "\" must be an object or null, got ", brief(v));
  const char* type_key = v.contains("rope_type") ? "rope_type" : "type";
  const json type = v.contains(type_key) ? v.at(type_key) : json("default");
  SG_CHECK(type == "default", source, ": \"", key, "\" asks for ", type_key, " ", brief(type),
           " (scaled rotary embedding), which sinkgraph's Llama does not implement; only plain "
           "RoPE (null, or rope_type \"default\")");
  if (v.contains("partial_rotary_factor")) {
    const json& f = v.at("partial_rotary_factor");
    SG_CHECK(f.is_number() && f.get<double>() == 1.0, source, ": \"", key,
             "\".partial_rotary_factor ", brief(f),
             " rotates part of each head, which sinkgraph's Llama does not implement");
  }
  return v.contains("rope_theta") ? config_number(v, "rope_theta", theta, source + " " + key)
                                  : theta;
}

// Qwen2 attends over a sliding window in the layers layer_types marks
// "sliding_attention" (transformers 5; older configs: every layer from
// max_window_layers on when use_sliding_window is true). sinkgraph's
// attention sees the whole cache, so only full attention is accepted.
void check_full_attention(const json& j, const std::string& source) {
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const json& types = j.at("layer_types");
    SG_CHECK(types.is_array(), source, ": \"layer_types\" must be an array, got ", brief(types));
    for (std::size_t i = 0; i < types.size(); ++i) {
      SG_CHECK(types[i] == "full_attention", source, ": \"layer_types\"[", i, "] is ",
               brief(types[i]),
               "; sinkgraph's attention implements \"full_attention\" only (no sliding window)");
    }
    return;
  }
  refuse_if_true(j, "use_sliding_window", "attends over a sliding window", source);
}

}  // namespace

bool is_hf_config(const json& j) { return j.is_object() && j.contains("model_type"); }

// Note [Hugging Face config keys]
// Read: the sizes (required: a config that left one out would get
// transformers' default for a 7B model, never what was meant), then
// num_key_value_heads (absent or null: the attention heads), rms_norm_eps
// (1e-6), rope_theta (10000), tie_word_embeddings (false), as transformers'
// LlamaConfig. model_type "qwen2" reads the same keys (Qwen2Config's
// defaults are LlamaConfig's) and adds q/k/v biases, which Qwen2 always has.
// Refused, naming the key: anything that changes the math and that the
// model does not implement (Llama's attention_bias, which also biases the
// output projection; mlp_bias; a sliding window). Everything else is ignored, as
// transformers ignores what the model does not read (architectures,
// torch_dtype, bos_token_id, transformers_version, pretraining_tp: a
// different summation order of the same products, ...).
LlamaConfig parse_hf_config(const json& j, const std::string& source) {
  SG_ASSERT(is_hf_config(j), "parse_hf_config: no model_type");
  const json& type = j.at("model_type");
  SG_CHECK(type == "llama" || type == "qwen2", source, ": \"model_type\" is ", brief(type),
           "; only \"llama\" and \"qwen2\" Hugging Face checkpoints are supported");
  const bool qwen2 = type == "qwen2";
  SG_CHECK(!j.contains("quantization_config") || j.at("quantization_config").is_null(), source,
           ": \"quantization_config\": quantized checkpoints are not supported (only F32, F16 and "
           "BF16 weights)");
  if (qwen2) {
    check_full_attention(j, source);
  } else {
    // Llama's attention_bias also adds one to the output projection.
    refuse_if_true(j, "attention_bias", "adds biases to the attention projections", source);
    refuse_if_true(j, "mlp_bias", "adds biases to the feed-forward projections", source);
  }
  if (j.contains("hidden_act")) {
    const json& act = j.at("hidden_act");
    SG_CHECK(act == "silu" || act == "swish", source, ": \"hidden_act\" is ", brief(act),
             "; sinkgraph's Llama implements \"silu\" (SwiGLU) only");
  }
  double theta = config_number(j, "rope_theta", kHfRopeTheta, source);
  (void)check_rope_object(j, "rope_scaling", theta, source);
  theta = check_rope_object(j, "rope_parameters", theta, source);
  if (j.contains("partial_rotary_factor")) {
    const json& f = j.at("partial_rotary_factor");
    SG_CHECK(f.is_null() || (f.is_number() && f.get<double>() == 1.0), source,
             ": \"partial_rotary_factor\" ", brief(f),
             " rotates part of each head, which sinkgraph's Llama does not implement");
  }

  LlamaConfig c;
  c.dim = config_int(j, "hidden_size", source);
  c.hidden_dim = config_int(j, "intermediate_size", source);
  c.n_layers = config_int(j, "num_hidden_layers", source);
  c.n_heads = config_int(j, "num_attention_heads", source);
  c.n_kv_heads = j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null()
                     ? config_int(j, "num_key_value_heads", source)
                     : c.n_heads;
  c.vocab_size = config_int(j, "vocab_size", source);
  c.max_seq_len = config_int(j, "max_position_embeddings", source);
  c.norm_eps = config_number(j, "rms_norm_eps", kHfNormEps, source);
  c.rope_theta = theta;
  c.rope_style = ops::RopeStyle::half;
  c.attention_bias = qwen2;  // Qwen2's q, k and v projections always have one
  c.shared_classifier = false;
  if (j.contains("tie_word_embeddings")) {
    const json& v = j.at("tie_word_embeddings");
    SG_CHECK(v.is_boolean(), source, ": \"tie_word_embeddings\" must be true or false, got ",
             brief(v));
    c.shared_classifier = v.get<bool>();
  }
  validate_config(c, source);
  if (j.contains("head_dim") && !j.at("head_dim").is_null()) {
    const std::int64_t head_dim = config_int(j, "head_dim", source);
    SG_CHECK(head_dim == c.head_size(), source, ": \"head_dim\" is ", head_dim,
             " but hidden_size / num_attention_heads is ", c.head_size(),
             "; sinkgraph's Llama needs head_dim = hidden_size / num_attention_heads");
  }
  return c;
}

namespace {

// A shard must be a plain file name in the checkpoint's folder: an index
// naming "../x" or "/etc/x" would read files the user never pointed at.
void check_shard_name(const json& file, const std::string& tensor, const std::string& index) {
  SG_CHECK(file.is_string(), index, ": the weight_map entry of tensor ", tensor,
           " must be a shard file name, got ", brief(file));
  const auto& f = file.get_ref<const std::string&>();
  bool plain = !f.empty() && f.size() <= 255 && f != "." && f != "..";
  for (const char ch : f) {
    const auto u = static_cast<unsigned char>(ch);
    plain = plain && ch != '/' && ch != '\\' && u >= 0x20 && u != 0x7F;
  }
  SG_CHECK(plain, index, ": shard ", brief(file), " of tensor ", tensor,
           " is not a plain file name in the checkpoint's folder (no folders, no \"..\", no "
           "absolute paths)");
  SG_CHECK(f.ends_with(".safetensors"), index, ": shard ", brief(file), " of tensor ", tensor,
           " is not a .safetensors file");
}

}  // namespace

LlamaModel parse_hf_sharded(const LlamaConfig& c, std::string_view index_json,
                            const std::string& index_name, const ShardOpener& open_shard,
                            const TensorParallel& tp) {
  const json index = parse_json(index_json, index_name, "the index");
  SG_CHECK(index.is_object(), index_name, ": the index must be a JSON object, got ",
           index.type_name());
  if (index.contains("metadata")) {
    const json& m = index.at("metadata");
    SG_CHECK(m.is_object() || m.is_null(), index_name, ": \"metadata\" must be an object, got ",
             brief(m));
  }
  SG_CHECK(index.contains("weight_map"), index_name, ": missing \"weight_map\"");
  const json& map = index.at("weight_map");
  SG_CHECK(map.is_object(), index_name,
           ": \"weight_map\" must be an object of tensor names to shard files, got ", brief(map));

  // The whole index is checked before any shard is opened.
  std::map<std::string, std::string, std::less<>> shard_of;  // tensor -> file
  std::map<std::string, std::string> first_tensor;           // file -> a tensor in it
  for (const auto& [tensor, file] : map.items()) {
    check_shard_name(file, tensor, index_name);
    SG_CHECK(hf_naming().parse(tensor, c).has_value(), index_name, ": the weight_map lists tensor ",
             tensor, ", which is not a Llama weight of this config (", c.str(),
             "; names in docs/model.md)");
    const auto& f = file.get_ref<const std::string&>();
    shard_of.emplace(tensor, f);
    first_tensor.emplace(f, tensor);
  }

  // Every shard's header is checked against the weight_map, in both
  // directions, before any tensor is decoded.
  std::vector<SafetensorsFile> shards;
  shards.reserve(first_tensor.size());  // TensorMap points into it: no reallocation
  TensorMap tensors;
  for (const auto& [file, tensor] : first_tensor) {
    const ShardBytes bytes = open_shard(file, tensor);
    shards.push_back(parse_safetensors_header(bytes.bytes, bytes.name));
    const SafetensorsFile& shard = shards.back();
    for (const auto& [key, entry] : shard.entries) {
      const auto it = shard_of.find(key);
      SG_CHECK(it != shard_of.end(), shard.name, ": tensor ", key, " is not in the weight_map of ",
               index_name);
      SG_CHECK(it->second == file, shard.name, ": tensor ", key,
               " is in this shard, but the weight_map of ", index_name, " puts it in ", it->second);
    }
    collect_tensors(shard, c, hf_naming(), tensors);
  }
  for (const auto& [tensor, file] : shard_of) {
    SG_CHECK(tensors.contains(tensor), index_name, ": the weight_map puts tensor ", tensor, " in ",
             file, ", whose header does not hold it");
  }
  std::vector<const SafetensorsFile*> files;
  files.reserve(shards.size());
  for (const SafetensorsFile& s : shards) files.push_back(&s);
  return build_model(c, tensors, hf_naming(), files, index_name, tp);
}

namespace {

const char* torch_dtype(DType dtype) {
  return dtype == DType::f32 ? "float32" : dtype == DType::f16 ? "float16" : "bfloat16";
}

std::string hf_config_json(const LlamaConfig& c, DType dtype) {
  json j;
  // A model with attention biases is Qwen2's architecture.
  j["architectures"] = {c.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = c.attention_bias ? "qwen2" : "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_size();
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  if (!c.attention_bias) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["tie_word_embeddings"] = c.shared_classifier;
  j["torch_dtype"] = torch_dtype(dtype);
  return j.dump(2) + "\n";
}

// HF's shard names: "model-00001-of-00003.safetensors" (5 digits; a model
// has fewer tensors than that).
std::string shard_file(std::int64_t k, std::int64_t n) {
  const auto five = [](std::int64_t v) {
    const std::string digits = std::to_string(v);
    return std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits;
  };
  return "model-" + five(k + 1) + "-of-" + five(n) + ".safetensors";
}

// "model-00001-of-00003.safetensors": a shard name of this layout.
bool is_shard_file(std::string_view name) {
  if (name.size() != std::string_view("model-00001-of-00003.safetensors").size()) return false;
  const auto digits = [&](std::size_t at) {
    for (std::size_t i = at; i < at + 5; ++i) {
      if (name[i] < '0' || name[i] > '9') return false;
    }
    return true;
  };
  return name.starts_with("model-") && digits(6) && name.substr(11, 4) == "-of-" && digits(15) &&
         name.substr(20) == ".safetensors";
}

// Contiguous groups of tensors, one per shard, balanced by bytes: a tensor
// joins a shard when its middle lies before the shard's share of the total;
// every shard gets at least one tensor.
std::vector<std::pair<std::size_t, std::size_t>> split(const std::vector<std::uint64_t>& sizes,
                                                       std::size_t shards) {
  std::uint64_t total = 0;
  for (const std::uint64_t s : sizes) total += s;
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  std::size_t begin = 0;
  std::uint64_t acc = 0;
  for (std::size_t k = 0; k < shards; ++k) {
    const std::size_t last = sizes.size() - (shards - 1 - k);  // one left for each later shard
    const auto target = static_cast<std::uint64_t>(static_cast<long double>(total) *
                                                   static_cast<long double>(k + 1) /
                                                   static_cast<long double>(shards));
    std::size_t end = begin + 1;
    acc += sizes[begin];
    while (end < last && (k + 1 == shards || acc + sizes[end] / 2 <= target)) acc += sizes[end++];
    groups.emplace_back(begin, end);
    begin = end;
  }
  SG_ASSERT(begin == sizes.size(), "split: ", begin, " of ", sizes.size(), " tensors placed");
  return groups;
}

Tensor permute_rows(const Tensor& t, std::int64_t heads, std::int64_t head_size, bool to_half,
                    const std::string& what) {
  SG_CHECK(t.defined() && (t.ndim() == 2 || t.ndim() == 1) && t.shape()[0] == heads * head_size,
           what, " is ", t.defined() ? t.str() : std::string("undefined"), "; expected ",
           heads * head_size, " rows");
  const std::vector<float> in = t.to_floats();
  std::vector<float> out(in.size());
  const auto cols = static_cast<std::size_t>(t.ndim() == 2 ? t.shape()[1] : 1);  // a bias: 1
  const std::int64_t half = head_size / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < half; ++i) {
      for (std::int64_t j = 0; j < 2; ++j) {
        // HF's permute: row 2i + j of a head (interleaved pairs) becomes row
        // j * D/2 + i (pairs i, i + D/2).
        const auto interleaved = static_cast<std::size_t>(h * head_size + 2 * i + j);
        const auto halves = static_cast<std::size_t>(h * head_size + j * half + i);
        const std::size_t from = to_half ? interleaved : halves;
        const std::size_t to = to_half ? halves : interleaved;
        std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(from * cols), cols,
                    out.begin() + static_cast<std::ptrdiff_t>(to * cols));
      }
    }
  }
  return Tensor::from_floats(out, t.shape(), DType::f32);
}

// Removes files of this layout that the checkpoint just written does not
// use (a previous save with another sharding), so the folder holds one model.
void remove_stale(const fs::path& dir, const std::vector<std::string>& written) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                      is_shard_file(name);
    if (!ours || std::find(written.begin(), written.end(), name) != written.end()) continue;
    if (!entry.is_regular_file(ec)) continue;
    fs::remove(entry.path(), ec);
    SG_CHECK(!ec, entry.path().string(),
             ": cannot remove this stale file of an earlier save: ", ec.message());
  }
}

}  // namespace

void save_hf_checkpoint(const LlamaModel& model_in, const std::string& dir, DType dtype,
                        std::int64_t shards) {
  SG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, dir,
           ": Hugging Face checkpoints are written as f32, f16 or bf16, not ", dtype_name(dtype));
  SG_CHECK(shards >= 1, dir, ": the shard count must be at least 1, got ", shards);
  SG_CHECK(
      static_cast<std::int64_t>(model_in.weights().layers.size()) == model_in.config().n_layers,
      dir, ": the model has ", model_in.weights().layers.size(), " layers but its config says ",
      model_in.config().n_layers);
  const LlamaModel model = convert_rope_style(model_in, ops::RopeStyle::half);
  LlamaConfig c = model.config();
  const LlamaWeights& w = model.weights();
  c.shared_classifier = classifier_is_shared(w);

  std::vector<std::pair<std::string, const Tensor*>> tensors;
  std::vector<std::uint64_t> sizes;
  for (const Slot& s : weight_slots(c)) {
    const std::string key = hf_naming().name(s);
    const Tensor& t = slot_tensor(w, s);
    const Shape want = slot_shape(c, s);
    SG_CHECK(t.defined() && t.shape() == want, dir, ": tensor ", key, " is ",
             t.defined() ? t.str() : std::string("undefined"), " but the config needs shape ",
             shape_str(want));
    tensors.emplace_back(key, &t);
    sizes.push_back(static_cast<std::uint64_t>(t.numel()) * dtype_size(dtype));
  }
  SG_CHECK(static_cast<std::uint64_t>(shards) <= tensors.size(), dir, ": ", shards, " shards for ",
           tensors.size(), " tensors; every shard needs at least one tensor");

  std::error_code ec;
  fs::create_directories(dir, ec);
  SG_CHECK(!ec && fs::is_directory(dir, ec), dir, ": cannot create this folder for the checkpoint",
           ec ? ": " + ec.message() : std::string(" (a file of that name exists)"));
  const fs::path folder(dir);
  const json metadata = {{"format", "pt"}};
  std::vector<std::string> written;
  if (shards == 1) {
    write_file((folder / "model.safetensors").string(),
               std::string_view(encode_safetensors(tensors, dtype, metadata)));
    written.emplace_back("model.safetensors");
  } else {
    json weight_map = json::object();
    std::uint64_t total = 0;
    const auto groups = split(sizes, static_cast<std::size_t>(shards));
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const std::string file = shard_file(static_cast<std::int64_t>(k), shards);
      const auto [begin, end] = groups[k];
      const std::vector<std::pair<std::string, const Tensor*>> group(
          tensors.begin() + static_cast<std::ptrdiff_t>(begin),
          tensors.begin() + static_cast<std::ptrdiff_t>(end));
      for (std::size_t i = begin; i < end; ++i) {
        weight_map[tensors[i].first] = file;
        total += sizes[i];
      }
      write_file((folder / file).string(),
                 std::string_view(encode_safetensors(group, dtype, metadata)));
      written.push_back(file);
    }
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file((folder / "model.safetensors.index.json").string(),
               std::string_view(index.dump(2) + "\n"));
    written.emplace_back("model.safetensors.index.json");
  }
  remove_stale(folder, written);
  write_file((folder / "config.json").string(), std::string_view(hf_config_json(c, dtype)));
}

}  // namespace detail

void save_hf(const LlamaModel& model, const std::string& dir, DType dtype, std::int64_t shards) {
  detail::save_hf_checkpoint(dequantize_model(model), dir, dtype, shards);
}

LlamaModel convert_rope_style(const LlamaModel& model_in, ops::RopeStyle style) {
  if (model_in.config().rope_style == style) return model_in;
  // Rows are permuted on f32 values: a quantized model is dequantized first.
  const LlamaModel model = dequantize_model(model_in);
  const LlamaConfig& c = model.config();
  detail::validate_config(c, "convert_rope_style");
  LlamaWeights w = model.weights();  // tensors shared with `model`
  SG_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.n_layers,
           "convert_rope_style: the model has ", w.layers.size(), " layers but its config says ",
           c.n_layers);
  const bool to_half = style == ops::RopeStyle::half;
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    LlamaLayer& layer = w.layers[l];
    const std::string at = "convert_rope_style: layers." + std::to_string(l);
    layer.wq = detail::permute_rows(layer.wq, c.n_heads, c.head_size(), to_half, at + ".wq");
    layer.wk = detail::permute_rows(layer.wk, c.n_kv_heads, c.head_size(), to_half, at + ".wk");
    if (c.attention_bias) {  // a bias entry follows its row
      layer.bq = detail::permute_rows(layer.bq, c.n_heads, c.head_size(), to_half, at + ".bq");
      layer.bk = detail::permute_rows(layer.bk, c.n_kv_heads, c.head_size(), to_half, at + ".bk");
    }
  }
  LlamaConfig out = c;
  out.rope_style = style;
  return LlamaModel(out, std::move(w));
}

}  // namespace sinkgraph::models
