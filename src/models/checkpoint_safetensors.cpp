// safetensors checkpoints with config.json beside them (docs/model.md), and
// load_model(), which picks the reader from the path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::uint64_t kMaxConfigBytes = 1'000'000;

// Note [Bounded JSON]: values are parsed at most kMaxJsonDepth deep, keys are
// unique per object (JSON allows duplicates and nlohmann keeps the last: a
// silent choice), and a bad value is quoted by a bounded excerpt, never by
// dumping it whole (a recursive dump of a deep value overflowed the stack).
constexpr int kMaxJsonDepth = 64;

std::string brief(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  std::string text = v.dump();  // a scalar: not recursive
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// Parses `text` under Note [Bounded JSON]; errors name `source`.
json parse_json(std::string_view text, const std::string& source, const char* what) {
  std::vector<std::vector<std::string>> keys;  // per open object
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event,
                                            json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        SG_CHECK(depth < kMaxJsonDepth, source, ": ", what, " nests deeper than ", kMaxJsonDepth,
                 " levels");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!keys.empty()) {
          auto& seen = keys.back();
          SG_CHECK(std::find(seen.begin(), seen.end(), key) == seen.end(), source, ": ", what,
                   " has the key \"", key.substr(0, 80), "\" twice in one object");
          seen.push_back(key);
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    SG_CHECK(false, source, ": ", what, " is malformed JSON: ", e.what());
  }
  return {};
}

// ---- config.json ----

std::int64_t config_int(const json& j, const char* key, const std::string& source) {
  SG_CHECK(j.contains(key), source, ": missing \"", key, "\"");
  const json& v = j.at(key);
  SG_CHECK(v.is_number_integer(), source, ": \"", key, "\" must be an integer, got ", brief(v));
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    SG_CHECK(u <= static_cast<std::uint64_t>(INT64_MAX), source, ": \"", key,
             "\" is too large: ", u);
    return static_cast<std::int64_t>(u);
  }
  return v.get<std::int64_t>();
}

// norm_eps and rope_theta: optional numbers (LlamaConfig::validate checks their range).
double config_number(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  SG_CHECK(v.is_number(), source, ": \"", key, "\" must be a number, got ", brief(v));
  return v.get<double>();
}

LlamaConfig parse_config(std::string_view text, const std::string& source) {
  const json j = parse_json(text, source, "the config");
  SG_CHECK(j.is_object(), source, ": expected a JSON object, got ", j.type_name());
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
  return c;
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
  return j.dump(2) + "\n";
}

// ---- tensor names ----

struct LayerField {
  const char* name;  // after "layers.{i}."
  Tensor LlamaLayer::*member;
};
constexpr int kLayerFields = 9;
const LayerField kFields[kLayerFields] = {{"attention_norm.weight", &LlamaLayer::attention_norm},
                                          {"attention.wq.weight", &LlamaLayer::wq},
                                          {"attention.wk.weight", &LlamaLayer::wk},
                                          {"attention.wv.weight", &LlamaLayer::wv},
                                          {"attention.wo.weight", &LlamaLayer::wo},
                                          {"ffn_norm.weight", &LlamaLayer::ffn_norm},
                                          {"feed_forward.w1.weight", &LlamaLayer::w1},
                                          {"feed_forward.w2.weight", &LlamaLayer::w2},
                                          {"feed_forward.w3.weight", &LlamaLayer::w3}};

Shape field_shape(const LlamaConfig& c, int field) {
  const std::int64_t kv = c.kv_dim();
  switch (field) {
    case 0:
    case 5:
      return {c.dim};
    case 1:
    case 4:
      return {c.dim, c.dim};
    case 2:
    case 3:
      return {kv, c.dim};
    case 6:
    case 8:
      return {c.hidden_dim, c.dim};
    default:
      return {c.dim, c.hidden_dim};
  }
}

// Where a tensor name goes: layer -1 for the top-level tensors (field 0
// tok_embeddings, 1 norm, 2 output), else a layer and a kFields index.
struct Slot {
  std::int64_t layer = -1;
  int field = 0;
};

std::optional<Slot> parse_name(std::string_view name, const LlamaConfig& c) {
  if (name == "tok_embeddings.weight") return Slot{-1, 0};
  if (name == "norm.weight") return Slot{-1, 1};
  if (name == "output.weight") return Slot{-1, 2};
  constexpr std::string_view prefix = "layers.";
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  std::int64_t layer = 0;
  std::size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') {
    if (digits > 0 && layer == 0) return std::nullopt;  // no leading zeros
    layer = layer * 10 + (name[digits] - '0');
    if (++digits > 9 || layer >= c.n_layers) return std::nullopt;
  }
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return std::nullopt;
  name.remove_prefix(digits + 1);
  for (int f = 0; f < kLayerFields; ++f) {
    if (name == kFields[f].name) return Slot{layer, f};
  }
  return std::nullopt;
}

Shape slot_shape(const LlamaConfig& c, const Slot& s) {
  if (s.layer >= 0) return field_shape(c, s.field);
  return s.field == 1 ? Shape{c.dim} : Shape{c.vocab_size, c.dim};
}

std::string layer_name(std::int64_t layer, int field) {
  return "layers." + std::to_string(layer) + "." + kFields[field].name;
}

// ---- the header ----

struct Entry {
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

std::uint64_t json_u64(const json& v, const std::string& where) {
  SG_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0), where,
           " must be a non-negative integer, got ", brief(v));
  return v.get<std::uint64_t>();
}

Entry parse_entry(const json& v, const std::string& where, std::uint64_t data_size) {
  SG_CHECK(v.is_object(), where, ": expected an object, got ", brief(v));
  SG_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
           ": needs \"dtype\", \"shape\" and \"data_offsets\"");
  Entry e;
  const json& dtype = v.at("dtype");
  if (dtype == "F32") {
    e.dtype = DType::f32;
  } else if (dtype == "F16") {
    e.dtype = DType::f16;
  } else if (dtype == "BF16") {
    e.dtype = DType::bf16;
  } else {
    SG_CHECK(false, where, " has dtype ", brief(dtype), "; supported: F32, F16, BF16");
  }
  const json& shape = v.at("shape");
  SG_CHECK(shape.is_array() && shape.size() <= static_cast<std::size_t>(kMaxDims), where,
           ": shape must be an array of at most ", kMaxDims, " sizes, got ", brief(shape));
  std::uint64_t numel = 1;
  for (const json& d : shape) {
    const std::uint64_t n = json_u64(d, where + ": shape entry");
    SG_CHECK(n <= static_cast<std::uint64_t>(INT64_MAX), where, ": shape entry ", n,
             " is too large");
    e.shape.push_back(static_cast<std::int64_t>(n));
    numel = detail::sat_mul(numel, n);
  }
  const json& offsets = v.at("data_offsets");
  SG_CHECK(offsets.is_array() && offsets.size() == 2, where,
           ": data_offsets must be [begin, end], got ", brief(offsets));
  e.begin = json_u64(offsets[0], where + ": data_offsets begin");
  e.end = json_u64(offsets[1], where + ": data_offsets end");
  SG_CHECK(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
           "] are not a range within the ", data_size, "-byte data section");
  const std::uint64_t want = detail::sat_mul(numel, dtype_size(e.dtype));
  SG_CHECK(e.end - e.begin == want, where, ": data_offsets [", e.begin, ", ", e.end, "] hold ",
           e.end - e.begin, " bytes but shape ", shape_str(e.shape), " of ",
           dtype.get<std::string>(), " needs ", want);
  return e;
}

LlamaModel parse_with_config(std::span<const std::uint8_t> bytes, const LlamaConfig& config_in,
                             const std::string& name) {
  LlamaConfig c = config_in;
  SG_CHECK(bytes.size() >= 8, name, ": the file has ", bytes.size(),
           " bytes, too short for the safetensors header length (8 bytes)");
  const std::uint64_t header_len = detail::read_u64(bytes, 0, name, "header length");
  SG_CHECK(header_len <= kMaxHeaderBytes, name, ": header length ", header_len,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  SG_CHECK(header_len <= bytes.size() - 8, name, ": header length ", header_len,
           " runs past the end of the file (", bytes.size(), " bytes)");
  const auto header_bytes = bytes.subspan(8, static_cast<std::size_t>(header_len));
  const auto data = bytes.subspan(8 + static_cast<std::size_t>(header_len));
  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size()),
      name, "the header");
  SG_CHECK(header.is_object(), name, ": the header must be a JSON object, got ",
           header.type_name());

  // Every entry is checked (dtype, shape, offsets, size, name) before any
  // tensor is allocated, so allocations are bounded by the file size.
  std::map<std::string, std::pair<Slot, Entry>, std::less<>> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      SG_CHECK(value.is_object(), name, ": __metadata__ must be an object");
      continue;
    }
    const std::string where = std::string(name).append(": tensor ").append(key);
    const Entry e = parse_entry(value, where, data.size());
    const auto slot = parse_name(key, c);
    SG_CHECK(slot.has_value(), where, " is not a Llama weight of this config (", c.str(),
             "; names in docs/model.md)");
    const Shape want = slot_shape(c, *slot);
    SG_CHECK(e.shape == want, where, " has shape ", shape_str(e.shape), " but the config (",
             c.str(), ") needs ", shape_str(want));
    entries.emplace(key, std::make_pair(*slot, e));
  }
  c.shared_classifier = !entries.contains("output.weight");
  // Required tensors, in a fixed order; the walk stops at the first missing one.
  const std::uint64_t required = 2 + kLayerFields * static_cast<std::uint64_t>(c.n_layers);
  const std::uint64_t present = entries.size() - (c.shared_classifier ? 0 : 1);
  if (present < required) {
    for (const char* top : {"tok_embeddings.weight", "norm.weight"}) {
      SG_CHECK(entries.contains(top), name, ": missing tensor ", top);
    }
    for (std::int64_t l = 0; l < c.n_layers; ++l) {
      for (int f = 0; f < kLayerFields; ++f) {
        const std::string key = layer_name(l, f);
        SG_CHECK(entries.contains(key), name, ": missing tensor ", key);
      }
    }
    SG_ASSERT(false, "safetensors: ", present, " of ", required, " tensors but none missing");
  }
  // The tensors cover the data section exactly once, as the format requires:
  // no two overlap and no bytes lie between or after them.
  std::vector<std::pair<std::uint64_t, const std::string*>> ranges;
  ranges.reserve(entries.size());
  for (const auto& [key, se] : entries) ranges.emplace_back(se.second.begin, &key);
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, key] : ranges) {
    const Entry& e = entries.at(*key).second;
    SG_CHECK(begin >= covered, name, ": tensor ", *key, " (bytes [", e.begin, ", ", e.end,
             ")) overlaps the tensor before it, which ends at byte ", covered);
    SG_CHECK(begin == covered, name, ": bytes [", covered, ", ", begin,
             ") of the data section belong to no tensor (a hole before tensor ", *key, ")");
    covered = e.end;
  }
  SG_CHECK(covered == data.size(), name, ": bytes [", covered, ", ", data.size(),
           ") at the end of the data section belong to no tensor");

  LlamaWeights weights;
  weights.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (const auto& [key, se] : entries) {
    const auto& [slot, e] = se;
    const auto raw = detail::checked_range(data, e.begin, e.end - e.begin, name, "tensor " + key);
    Tensor t = detail::decode_tensor(raw, e.dtype, e.shape,
                                     std::string(name).append(": tensor ").append(key));
    if (slot.layer >= 0) {
      weights.layers[static_cast<std::size_t>(slot.layer)].*(kFields[slot.field].member) =
          std::move(t);
    } else if (slot.field == 0) {
      weights.tok_embeddings = std::move(t);
    } else if (slot.field == 1) {
      weights.norm = std::move(t);
    } else {
      weights.output = std::move(t);
    }
  }
  if (c.shared_classifier) weights.output = weights.tok_embeddings;
  return LlamaModel(c, std::move(weights));
}

std::string read_config_file(const std::string& path) {
  return sinkgraph::read_text_file(path, kMaxConfigBytes, "config");
}

}  // namespace

LlamaModel parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& config_json,
                             const std::string& name) {
  const std::string config_source = name + " (config.json)";
  const LlamaConfig c = parse_config(config_json, config_source);
  detail::validate_config(c, config_source);
  return parse_with_config(bytes, c, name);
}

LlamaModel load_safetensors(const std::string& path, const std::string& config_path) {
  const detail::MappedFile file(path);  // the checkpoint's own problems first
  const LlamaConfig c = parse_config(read_config_file(config_path), config_path);
  detail::validate_config(c, config_path);
  return parse_with_config(file.bytes(), c, path);
}

LlamaModel load_model(const std::string& path) {
  SG_CHECK(!path.empty(), "the model path is empty");
  // Each file is opened to learn why it cannot be read (not found, permission
  // denied, not a regular file), and the message says what it is for.
  const auto readable = [](const std::string& file, const char* what, const std::string& context) {
    try {
      std::uint64_t size = 0;
      ::close(sinkgraph::open_regular_file(file, size, what));
    } catch (const Error& e) {
      SG_CHECK(false, context, e.what());
    }
  };
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string model = (fs::path(path) / "model.safetensors").string();
    const std::string config = (fs::path(path) / "config.json").string();
    const std::string context = path + ": a model folder needs model.safetensors and config.json: ";
    readable(model, "checkpoint", context);
    readable(config, "config", context);
    return load_safetensors(model, config);
  }
  if (path.ends_with(".safetensors")) {
    const std::string config = (fs::path(path).parent_path() / "config.json").string();
    readable(config, "config", path + ": needs config.json beside it: ");
    readable(path, "checkpoint", "");
    return load_safetensors(path, config);
  }
  return load_llama2c(path);
}

namespace detail {

void save_safetensors(const LlamaModel& model, const std::string& path_in, DType dtype) {
  SG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, path_in,
           ": safetensors checkpoints are written as f32, f16 or bf16, not ", dtype_name(dtype));
  std::error_code ec;
  const bool folder = fs::is_directory(path_in, ec);
  const std::string path = folder ? (fs::path(path_in) / "model.safetensors").string() : path_in;
  const std::string config_path = (fs::path(path).parent_path() / "config.json").string();
  const LlamaConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  SG_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.n_layers, path, ": the model has ",
           w.layers.size(), " layers but its config says ", c.n_layers);

  std::vector<std::pair<std::string, const Tensor*>> tensors;
  tensors.emplace_back("tok_embeddings.weight", &w.tok_embeddings);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    for (int f = 0; f < kLayerFields; ++f) {
      tensors.emplace_back(layer_name(l, f),
                           &(w.layers[static_cast<std::size_t>(l)].*(kFields[f].member)));
    }
  }
  tensors.emplace_back("norm.weight", &w.norm);
  if (!classifier_is_shared(w)) tensors.emplace_back("output.weight", &w.output);

  const char* dtype_tag = dtype == DType::f32 ? "F32" : dtype == DType::f16 ? "F16" : "BF16";
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<std::uint8_t> data;
  for (const auto& [key, t] : tensors) {
    const auto slot = parse_name(key, c);
    SG_ASSERT(slot.has_value(), "save_safetensors: ", key);
    const Shape want = slot_shape(c, *slot);
    SG_CHECK(t->defined() && t->shape() == want, path, ": tensor ", key, " is ",
             t->defined() ? t->str() : std::string("undefined"), " but the config needs shape ",
             shape_str(want));
    const std::uint64_t begin = data.size();
    append_encoded(data, *t, dtype);
    header[key] = {{"dtype", dtype_tag},
                   {"shape", std::vector<std::int64_t>(want.begin(), want.end())},
                   {"data_offsets", {begin, static_cast<std::uint64_t>(data.size())}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  const std::uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xFF);
  out += text;
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  write_file(path, std::string_view(out));
  write_file(config_path, std::string_view(config_to_json(c)));
}

}  // namespace detail
}  // namespace sinkgraph::models
