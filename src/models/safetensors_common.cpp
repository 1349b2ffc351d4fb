#include "models/safetensors_common.h"

#include <algorithm>
#include <cstring>

#include "models/checkpoint_common.h"
#include "sinkgraph/error.h"

namespace sinkgraph::models::detail {

using nlohmann::json;

namespace {
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
}  // namespace

// ---- JSON ----

std::string brief(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  std::string text = v.dump();  // a scalar: not recursive
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

json parse_json(std::string_view text, const std::string& source, const char* what) {
  SG_CHECK(!text.starts_with("\xEF\xBB\xBF"), source, ": ", what,
           " starts with a UTF-8 byte order mark, which JSON does not allow (save it as UTF-8 "
           "without BOM)");
  const std::size_t nul = text.find('\0');
  SG_CHECK(nul == std::string_view::npos, source, ": ", what, " holds a NUL byte at offset ", nul,
           " of ", text.size(), ", which JSON text never holds");
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

double config_number(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  SG_CHECK(v.is_number(), source, ": \"", key, "\" must be a number, got ", brief(v));
  return v.get<double>();
}

// ---- the safetensors header ----

namespace {

std::uint64_t json_u64(const json& v, const std::string& where) {
  SG_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0), where,
           " must be a non-negative integer, got ", brief(v));
  return v.get<std::uint64_t>();
}

TensorEntry parse_entry(const json& v, const std::string& where, std::uint64_t data_size) {
  SG_CHECK(v.is_object(), where, ": expected an object, got ", brief(v));
  SG_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
           ": needs \"dtype\", \"shape\" and \"data_offsets\"");
  TensorEntry e;
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
    numel = sat_mul(numel, n);
  }
  const json& offsets = v.at("data_offsets");
  SG_CHECK(offsets.is_array() && offsets.size() == 2, where,
           ": data_offsets must be [begin, end], got ", brief(offsets));
  e.begin = json_u64(offsets[0], where + ": data_offsets begin");
  e.end = json_u64(offsets[1], where + ": data_offsets end");
  SG_CHECK(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
           "] are not a range within the ", data_size, "-byte data section");
  const std::uint64_t want = sat_mul(numel, dtype_size(e.dtype));
  SG_CHECK(e.end - e.begin == want, where, ": data_offsets [", e.begin, ", ", e.end, "] hold ",
           e.end - e.begin, " bytes but shape ", shape_str(e.shape), " of ",
           dtype.get<std::string>(), " needs ", want);
  return e;
}

}  // namespace

SafetensorsFile parse_safetensors_header(std::span<const std::uint8_t> bytes,
                                         const std::string& name) {
  SG_CHECK(bytes.size() >= 8, name, ": the file has ", bytes.size(),
           " bytes, too short for the safetensors header length (8 bytes)");
  const std::uint64_t header_len = read_u64(bytes, 0, name, "header length");
  SG_CHECK(header_len <= kMaxHeaderBytes, name, ": header length ", header_len,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  SG_CHECK(header_len <= bytes.size() - 8, name, ": header length ", header_len,
           " runs past the end of the file (", bytes.size(), " bytes)");
  const auto header_bytes = bytes.subspan(8, static_cast<std::size_t>(header_len));
  SafetensorsFile file;
  file.name = name;
  file.data = bytes.subspan(8 + static_cast<std::size_t>(header_len));
  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size()),
      name, "the header");
  SG_CHECK(header.is_object(), name, ": the header must be a JSON object, got ",
           header.type_name());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      SG_CHECK(value.is_object(), name, ": __metadata__ must be an object");
      continue;
    }
    const std::string where = std::string(name).append(": tensor ").append(key);
    file.entries.emplace(key, parse_entry(value, where, file.data.size()));
  }
  return file;
}

void check_coverage(const SafetensorsFile& file) {
  std::vector<std::pair<std::uint64_t, const std::string*>> ranges;
  ranges.reserve(file.entries.size());
  for (const auto& [key, e] : file.entries) ranges.emplace_back(e.begin, &key);
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, key] : ranges) {
    const TensorEntry& e = file.entries.find(*key)->second;
    SG_CHECK(begin >= covered, file.name, ": tensor ", *key, " (bytes [", e.begin, ", ", e.end,
             ")) overlaps the tensor before it, which ends at byte ", covered);
    SG_CHECK(begin == covered, file.name, ": bytes [", covered, ", ", begin,
             ") of the data section belong to no tensor (a hole before tensor ", *key, ")");
    covered = e.end;
  }
  SG_CHECK(covered == file.data.size(), file.name, ": bytes [", covered, ", ", file.data.size(),
           ") at the end of the data section belong to no tensor");
}

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    default:
      SG_ASSERT(false, "safetensors_dtype: ", dtype_name(dtype));
  }
  return "";
}

std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               DType dtype, const json& metadata) {
  const char* tag = safetensors_dtype(dtype);
  json header = json::object();
  header["__metadata__"] = metadata;
  std::vector<std::uint8_t> data;
  for (const auto& [key, t] : tensors) {
    const std::uint64_t begin = data.size();
    append_encoded(data, *t, dtype);
    const Shape& shape = t->shape();
    header[key] = {{"dtype", tag},
                   {"shape", std::vector<std::int64_t>(shape.begin(), shape.end())},
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
  return out;
}

// ---- where tensors go ----

namespace {

struct LayerField {
  const char* ours;  // after "layers.{i}."
  const char* hf;    // after "model.layers.{i}."
  Tensor LlamaLayer::*member;
};
const LayerField kFields[kLayerFields] = {
    {"attention_norm.weight", "input_layernorm.weight", &LlamaLayer::attention_norm},
    {"attention.wq.weight", "self_attn.q_proj.weight", &LlamaLayer::wq},
    {"attention.wk.weight", "self_attn.k_proj.weight", &LlamaLayer::wk},
    {"attention.wv.weight", "self_attn.v_proj.weight", &LlamaLayer::wv},
    {"attention.wo.weight", "self_attn.o_proj.weight", &LlamaLayer::wo},
    {"ffn_norm.weight", "post_attention_layernorm.weight", &LlamaLayer::ffn_norm},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight", &LlamaLayer::w1},
    {"feed_forward.w2.weight", "mlp.down_proj.weight", &LlamaLayer::w2},
    {"feed_forward.w3.weight", "mlp.up_proj.weight", &LlamaLayer::w3},
    {"attention.wq.bias", "self_attn.q_proj.bias", &LlamaLayer::bq},
    {"attention.wk.bias", "self_attn.k_proj.bias", &LlamaLayer::bk},
    {"attention.wv.bias", "self_attn.v_proj.bias", &LlamaLayer::bv}};
// Fields from here on are the attention biases (LlamaConfig::attention_bias).
constexpr int kFirstBias = 9;
int layer_fields(const LlamaConfig& c) { return c.attention_bias ? kLayerFields : kFirstBias; }

// Top-level names by field: embedding, final norm, classifier.
const char* const kOurTop[3] = {"tok_embeddings.weight", "norm.weight", "output.weight"};
const char* const kHfTop[3] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
// Buffers of older HF checkpoints that transformers ignores on load (the
// rotary frequencies, recomputed from rope_theta).
constexpr std::string_view kHfInvFreq = "self_attn.rotary_emb.inv_freq";

std::optional<Slot> parse_named(std::string_view name, const LlamaConfig& c,
                                const char* const (&top)[3], std::string_view layer_prefix,
                                const char* LayerField::*field_name) {
  for (int f = 0; f < 3; ++f) {
    if (name == top[f]) return Slot{-1, f, false};
  }
  if (!name.starts_with(layer_prefix)) return std::nullopt;
  const auto layer = parse_layer_prefix(name.substr(layer_prefix.size()), c.n_layers);
  if (!layer) return std::nullopt;
  for (int f = 0; f < layer_fields(c); ++f) {
    if (layer->second == kFields[f].*field_name) return Slot{layer->first, f, false};
  }
  if (field_name == &LayerField::hf && layer->second == kHfInvFreq)
    return Slot{layer->first, 0, true};
  return std::nullopt;
}

std::optional<Slot> parse_our_name(std::string_view name, const LlamaConfig& c) {
  return parse_named(name, c, kOurTop, "layers.", &LayerField::ours);
}

std::optional<Slot> parse_hf_name(std::string_view name, const LlamaConfig& c) {
  return parse_named(name, c, kHfTop, "model.layers.", &LayerField::hf);
}

std::string our_name(const Slot& s) {
  SG_ASSERT(!s.ignored, "our_name: an ignored slot");
  if (s.layer < 0) return kOurTop[s.field];
  return "layers." + std::to_string(s.layer) + "." + kFields[s.field].ours;
}

std::string hf_name(const Slot& s) {
  SG_ASSERT(!s.ignored, "hf_name: an ignored slot");
  if (s.layer < 0) return kHfTop[s.field];
  return "model.layers." + std::to_string(s.layer) + "." + kFields[s.field].hf;
}

}  // namespace

std::optional<std::pair<std::int64_t, std::string_view>> parse_layer_prefix(std::string_view name,
                                                                            std::int64_t n_layers) {
  std::int64_t layer = 0;
  std::size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') {
    if (digits > 0 && layer == 0) return std::nullopt;  // no leading zeros
    layer = layer * 10 + (name[digits] - '0');
    if (++digits > 9 || layer >= n_layers) return std::nullopt;
  }
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return std::nullopt;
  return std::pair{layer, name.substr(digits + 1)};
}

Shape slot_shape(const LlamaConfig& c, const Slot& s) {
  if (s.ignored) return {c.head_size() / 2};  // inv_freq
  if (s.layer < 0) return s.field == 1 ? Shape{c.dim} : Shape{c.vocab_size, c.dim};
  switch (s.field) {
    case 0:
    case 5:
      return {c.dim};
    case 1:
    case 4:
      return {c.dim, c.dim};
    case 2:
    case 3:
      return {c.kv_dim(), c.dim};
    case 6:
    case 8:
      return {c.hidden_dim, c.dim};
    case 7:
      return {c.dim, c.hidden_dim};
    case 9:
      return {c.dim};
    default:
      return {c.kv_dim()};
  }
}

Tensor& slot_tensor(LlamaWeights& w, const Slot& s) {
  SG_ASSERT(!s.ignored, "slot_tensor: an ignored slot");
  if (s.layer >= 0) return w.layers[static_cast<std::size_t>(s.layer)].*(kFields[s.field].member);
  return s.field == 0 ? w.tok_embeddings : s.field == 1 ? w.norm : w.output;
}

Tensor LlamaLayer::*slot_member(const Slot& s) {
  return s.layer >= 0 && !s.ignored ? kFields[s.field].member : nullptr;
}

const Tensor& slot_tensor(const LlamaWeights& w, const Slot& s) {
  return slot_tensor(const_cast<LlamaWeights&>(w), s);
}

const Naming& our_naming() {
  static const Naming naming{&parse_our_name, &our_name};
  return naming;
}

const Naming& hf_naming() {
  static const Naming naming{&parse_hf_name, &hf_name};
  return naming;
}

std::vector<Slot> weight_slots(const LlamaConfig& c) {
  std::vector<Slot> slots{{-1, 0, false}};
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    for (int f = 0; f < layer_fields(c); ++f) slots.push_back({l, f, false});
  }
  slots.push_back({-1, 1, false});
  if (!c.shared_classifier) slots.push_back({-1, 2, false});
  return slots;
}

void collect_tensors(const SafetensorsFile& file, const LlamaConfig& c, const Naming& naming,
                     TensorMap& out) {
  for (const auto& [key, e] : file.entries) {
    const auto slot = naming.parse(key, c);
    SG_CHECK(slot.has_value(), file.name, ": tensor ", key,
             " is not a Llama weight of this config (", c.str(), "; names in docs/model.md)");
    const Shape want = slot_shape(c, *slot);
    SG_CHECK(e.shape == want, file.name, ": tensor ", key, " has shape ", shape_str(e.shape),
             " but the config (", c.str(), ") needs ", shape_str(want));
    const bool added = out.emplace(key, Located{*slot, e, &file}).second;
    SG_CHECK(added, file.name, ": tensor ", key, " is also in ", out.at(key).file->name);
  }
}

LlamaModel build_model(const LlamaConfig& c, const TensorMap& tensors, const Naming& naming,
                       const std::vector<const SafetensorsFile*>& files, const std::string& source,
                       const TensorParallel& tp) {
  // Required tensors, in a fixed order: the walk stops at the first missing one.
  const std::vector<Slot> required = weight_slots(c);
  for (const Slot& s : required) {
    const std::string key = naming.name(s);
    SG_CHECK(tensors.contains(key), source, ": missing tensor ", key,
             s.layer < 0 && s.field == 2 ? " (the classifier is not tied to the embedding)" : "");
  }
  // Every file's bytes belong to exactly one tensor; only then is anything
  // decoded, so allocations are bounded by the files' sizes.
  for (const SafetensorsFile* file : files) check_coverage(*file);
  check_split(c, tp);

  LlamaWeights weights;
  weights.layers.resize(static_cast<std::size_t>(c.n_layers));
  Tensor tied_copy;  // a classifier stored although tied to the embedding
  for (const auto& [key, t] : tensors) {
    const auto raw = checked_range(t.file->data, t.entry.begin, t.entry.end - t.entry.begin,
                                   t.file->name, "tensor " + key);
    const std::string what = std::string(t.file->name).append(": tensor ").append(key);
    if (t.slot.ignored) {  // an inv_freq buffer
      check_unused_tensor(raw, t.entry.dtype, what);
      continue;
    }
    const bool classifier = t.slot.layer < 0 && t.slot.field == 2 && !c.shared_classifier;
    const auto slice = t.slot.layer >= 0 ? shard_slice(c, tp, kFields[t.slot.field].member)
                       : classifier      ? classifier_slice(c, tp)
                                         : std::nullopt;
    Tensor value = slice ? decode_tensor_slice(raw, t.entry.dtype, t.entry.shape, *slice, what)
                         : decode_tensor(raw, t.entry.dtype, t.entry.shape, what);
    if (c.shared_classifier && t.slot.layer < 0 && t.slot.field == 2) {
      tied_copy = std::move(value);
    } else {
      slot_tensor(weights, t.slot) = std::move(value);
    }
  }
  if (c.shared_classifier) {
    if (tied_copy.defined()) {
      const std::vector<float> a = tied_copy.to_floats();
      const std::vector<float> b = weights.tok_embeddings.to_floats();
      const std::string key = naming.name(Slot{-1, 2, false});
      SG_CHECK(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0, source,
               ": tensor ", key, " differs from ", naming.name(Slot{-1, 0, false}),
               " but the config ties them (tie_word_embeddings)");
    }
    weights.output = weights.tok_embeddings;
  }
  return LlamaModel(c, std::move(weights), tp);
}

}  // namespace sinkgraph::models::detail
