// GGUF checkpoints (docs/model.md, "GGUF"): llama.cpp's Llama and Qwen2 files
// read into our model, and our models written as GGUF in f32, f16, bf16, Q8_0
// or Q4_0.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/checkpoint_common.h"
#include "models/gguf.h"
#include "models/safetensors_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::models {
namespace {

using detail::GgmlType;
using detail::GgufFile;
using detail::GgufTensorInfo;
using detail::Slot;

// Note [GGUF names and the rotary layout]
// llama.cpp names a Llama's tensors token_embd, output_norm, output and
// blk.{i}.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate (our w1), ffn_down (w2), ffn_up (w3)}, plus attn_{q,k,v}.bias for
// Qwen2. Its converter permutes a Llama's q and k rows from Hugging Face's
// half-split rotary layout back to Meta's interleaved pairs (llama.cpp rotates
// "llama" with adjacent pairs, LLAMA_ROPE_TYPE_NORM), and leaves Qwen2's as
// they are (rotated half-split, NEOX). So a "llama" file is
// RopeStyle::interleaved and a "qwen2" file RopeStyle::half, and the writer
// converts a model to its architecture's layout (convert_rope_style) first.
constexpr const char* kTop[3] = {"token_embd.weight", "output_norm.weight", "output.weight"};
constexpr const char* kLayer[detail::kLayerFields] = {
    "attn_norm.weight",   "attn_q.weight",   "attn_k.weight",   "attn_v.weight",
    "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_down.weight",
    "ffn_up.weight",      "attn_q.bias",     "attn_k.bias",     "attn_v.bias"};
constexpr int kFieldsWithoutBias = 9;

std::optional<Slot> parse_gguf_name(std::string_view name, const LlamaConfig& c) {
  for (int f = 0; f < 3; ++f) {
    if (name == kTop[f]) return Slot{-1, f, false};
  }
  constexpr std::string_view kBlock = "blk.";
  if (!name.starts_with(kBlock)) return std::nullopt;
  const auto layer = detail::parse_layer_prefix(name.substr(kBlock.size()), c.n_layers);
  if (!layer) return std::nullopt;
  const int fields = c.attention_bias ? detail::kLayerFields : kFieldsWithoutBias;
  for (int f = 0; f < fields; ++f) {
    if (layer->second == kLayer[f]) return Slot{layer->first, f, false};
  }
  return std::nullopt;
}

std::string gguf_name(const Slot& s) {
  if (s.layer < 0) return kTop[s.field];
  return "blk." + std::to_string(s.layer) + "." + kLayer[s.field];
}

struct Arch {
  std::string_view name;
  bool attention_bias;
  ops::RopeStyle rope_style;
};
constexpr Arch kLlama{"llama", false, ops::RopeStyle::interleaved};
constexpr Arch kQwen2{"qwen2", true, ops::RopeStyle::half};

// ggml's file types (general.file_type): what most of the weights are.
std::uint32_t file_type(GgufType t) {
  switch (t) {
    case GgufType::f32:
      return 0;  // ALL_F32
    case GgufType::f16:
      return 1;  // MOSTLY_F16
    case GgufType::q4_0:
      return 2;  // MOSTLY_Q4_0
    case GgufType::q8_0:
      return 7;  // MOSTLY_Q8_0
    case GgufType::bf16:
      return 32;  // MOSTLY_BF16
  }
  return 0;
}

GgmlType ggml_type(GgufType t) {
  switch (t) {
    case GgufType::f32:
      return GgmlType::f32;
    case GgufType::f16:
      return GgmlType::f16;
    case GgufType::bf16:
      return GgmlType::bf16;
    case GgufType::q8_0:
      return GgmlType::q8_0;
    case GgufType::q4_0:
      return GgmlType::q4_0;
  }
  return GgmlType::f32;
}

const GgufTensorInfo* find_tensor(const GgufFile& f, std::string_view name) {
  for (const GgufTensorInfo& t : f.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// The model config from the metadata. Keys that would change the math and
// that the model does not implement are refused unless they hold the value
// that means "off": a file that needs them would load and compute something
// else, silently.
LlamaConfig parse_config(const GgufFile& f) {
  const auto arch_name = f.get_string("general.architecture");
  SG_CHECK(arch_name.has_value(), f.name, ": metadata general.architecture is missing");
  const Arch* arch = *arch_name == kLlama.name   ? &kLlama
                     : *arch_name == kQwen2.name ? &kQwen2
                                                 : nullptr;
  SG_CHECK(arch != nullptr, f.name, ": architecture \"", *arch_name,
           "\" is not supported (sinkgraph reads llama and qwen2)");
  const std::string p = std::string(arch->name) + ".";
  const auto required_int = [&](const char* key) {
    const auto v = f.get_int(p + key);
    SG_CHECK(v.has_value(), f.name, ": metadata ", p, key, " is missing");
    return *v;
  };
  LlamaConfig c;
  c.dim = required_int("embedding_length");
  c.n_layers = required_int("block_count");
  c.hidden_dim = required_int("feed_forward_length");
  c.n_heads = required_int("attention.head_count");
  c.n_kv_heads = f.get_int(p + "attention.head_count_kv").value_or(c.n_heads);
  c.max_seq_len = required_int("context_length");
  const auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  SG_CHECK(eps.has_value(), f.name, ": metadata ", p,
           "attention.layer_norm_rms_epsilon is missing");
  c.norm_eps = *eps;
  c.rope_theta = f.get_float(p + "rope.freq_base").value_or(10000.0);
  c.rope_style = arch->rope_style;
  c.attention_bias = arch->attention_bias;
  // The vocabulary is the embedding's rows; the classifier is tied to it
  // when the file has no output.weight (llama.cpp's rule).
  const GgufTensorInfo* embd = find_tensor(f, kTop[0]);
  SG_CHECK(embd != nullptr, f.name, ": missing tensor ", kTop[0]);
  SG_CHECK(embd->ne.size() == 2, f.name, ": tensor ", kTop[0], " has ", embd->ne.size(),
           " dimensions; expected 2");
  c.vocab_size = static_cast<std::int64_t>(embd->ne[1]);
  c.shared_classifier = find_tensor(f, kTop[2]) == nullptr;
  detail::validate_config(c, f.name);

  const auto same_as_head = [&](const char* key, const char* what) {
    const auto v = f.get_int(p + key);
    SG_CHECK(!v || *v == c.head_size(), f.name, ": metadata ", p, key, " is ", v.value_or(0),
             " but the head size (embedding_length / head_count) is ", c.head_size(), ": ", what,
             " is not implemented");
  };
  same_as_head("rope.dimension_count", "a partial rotary embedding");
  same_as_head("attention.key_length", "a head size other than dim / heads");
  same_as_head("attention.value_length", "a head size other than dim / heads");
  if (const auto v = f.get_int(p + "vocab_size")) {
    SG_CHECK(*v == c.vocab_size, f.name, ": metadata ", p, "vocab_size is ", *v, " but tensor ",
             kTop[0], " has ", c.vocab_size, " rows");
  }
  if (const auto* tokens = f.get_strings("tokenizer.ggml.tokens")) {
    SG_CHECK(static_cast<std::int64_t>(tokens->size()) == c.vocab_size, f.name,
             ": metadata tokenizer.ggml.tokens lists ", tokens->size(), " tokens but tensor ",
             kTop[0], " has ", c.vocab_size, " rows");
  }
  const auto scaling = f.get_string(p + "rope.scaling.type");
  SG_CHECK(!scaling || *scaling == "none", f.name, ": metadata ", p, "rope.scaling.type is \"",
           scaling.value_or(""), "\": rotary scaling is not implemented");
  if (!scaling) {
    const auto factor = f.get_float(p + "rope.scaling.factor");
    SG_CHECK(!factor || *factor == 0 || *factor == 1, f.name, ": metadata ", p,
             "rope.scaling.factor is ", factor.value_or(0), ": rotary scaling is not implemented");
  }
  const auto experts = f.get_int(p + "expert_count");
  SG_CHECK(!experts || *experts == 0, f.name, ": metadata ", p, "expert_count is ",
           experts.value_or(0), ": mixture-of-experts models are not implemented");
  for (const char* key :
       {"attention.sliding_window", "logit_scale", "embedding_scale", "residual_scale",
        "attention.scale", "attn_logit_softcapping", "final_logit_softcapping"}) {
    SG_CHECK(f.find(p + key) == nullptr, f.name, ": metadata ", p, key,
             " changes the model's arithmetic and is not implemented");
  }
  return c;
}

Shape torch_shape(const GgufTensorInfo& t) {
  Shape s;
  for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it)
    s.push_back(static_cast<std::int64_t>(*it));
  return s;
}

// One tensor decoded to f32 (whole, or rank tp.rank's slice), or a Q8_0 /
// Q4_0 matrix kept as its blocks when `keep_blocks`.
Tensor decode(const GgufFile& f, const GgufTensorInfo& t, const Shape& shape,
              const std::optional<detail::ShardSlice>& slice, bool keep_blocks) {
  const auto raw = detail::checked_range(f.data, t.offset, t.nbytes, f.name, "tensor " + t.name);
  const std::string what = f.name + ": tensor " + t.name;
  const auto decode_as = [&](std::span<const std::uint8_t> bytes, DType dtype) {
    return slice ? detail::decode_tensor_slice(bytes, dtype, shape, *slice, what)
                 : detail::decode_tensor(bytes, dtype, shape, what);
  };
  switch (t.type) {
    case GgmlType::f32:
      return decode_as(raw, DType::f32);
    case GgmlType::f16:
      return decode_as(raw, DType::f16);
    case GgmlType::bf16:
      return decode_as(raw, DType::bf16);
    case GgmlType::q8_0:
    case GgmlType::q4_0: {
      // A matrix keeps its blocks (Note [Quantized weights] in ops.h),
      // except under tensor parallelism (shard_model does not split blocks:
      // every rank dequantizes) and for a 1-D tensor: those are dequantized
      // whole, then decoded (and checked) as f32.
      if (keep_blocks && !slice && shape.size() == 2) {
        detail::check_block_scales(t.type, raw, what);
        const auto width = static_cast<std::int64_t>(t.nbytes) / shape[0];
        return detail::bytes_to_tensor(raw, {shape[0], width});
      }
      std::vector<float> values(static_cast<std::size_t>(numel(shape)));
      detail::dequantize_blocks(t.type, raw, values, what);
      const auto* p = reinterpret_cast<const std::uint8_t*>(values.data());
      return decode_as({p, values.size() * sizeof(float)}, DType::f32);
    }
  }
  SG_ASSERT(false, "decode: ggml type ", static_cast<std::uint32_t>(t.type));
  return {};
}

}  // namespace

LlamaModel parse_gguf(std::span<const std::uint8_t> bytes, const std::string& name,
                      const TensorParallel& tp) {
  const GgufFile f = detail::parse_gguf_file(bytes, name);
  const LlamaConfig c = parse_config(f);
  // Every tensor is a weight of this config with the shape it implies, and
  // every weight is present, before anything is decoded.
  std::vector<std::pair<Slot, const GgufTensorInfo*>> located;
  for (const GgufTensorInfo& t : f.tensors) {
    SG_CHECK(t.name != "rope_freqs.weight", name, ": tensor rope_freqs.weight (Llama 3.1's ",
             "rotary frequency scaling) is not implemented");
    const auto slot = parse_gguf_name(t.name, c);
    SG_CHECK(slot.has_value(), name, ": tensor ", t.name, " is not a weight of this model (",
             c.str(), "; names in docs/model.md)");
    const Shape want = detail::slot_shape(c, *slot);
    SG_CHECK(torch_shape(t) == want, name, ": tensor ", t.name, " has shape ",
             shape_str(torch_shape(t)), " but the config (", c.str(), ") needs ", shape_str(want));
    located.emplace_back(*slot, &t);
  }
  for (const Slot& s : detail::weight_slots(c)) {
    SG_CHECK(find_tensor(f, gguf_name(s)) != nullptr, name, ": missing tensor ", gguf_name(s));
  }
  detail::check_split(c, tp);

  LlamaWeights weights;
  weights.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (const auto& [slot, t] : located) {
    const bool classifier = slot.layer < 0 && slot.field == 2;
    const auto slice = slot.layer >= 0 ? detail::shard_slice(c, tp, detail::slot_member(slot))
                       : classifier    ? detail::classifier_slice(c, tp)
                                       : std::nullopt;
    detail::slot_tensor(weights, slot) =
        decode(f, *t, detail::slot_shape(c, slot), slice, tp.size == 1);
  }
  if (c.shared_classifier) weights.output = weights.tok_embeddings;
  return LlamaModel(c, std::move(weights), tp);
}

LlamaModel load_gguf(const std::string& path, const TensorParallel& tp) {
  const detail::FileBytes file(path);
  return parse_gguf(file.bytes(), path, tp);
}

void save_gguf(const LlamaModel& model_in, const std::string& path, GgufType type) {
  // A quantized matrix of the type asked for is written as it is; one of
  // another type is dequantized, then written as asked.
  const Arch& arch = model_in.config().attention_bias ? kQwen2 : kLlama;
  const LlamaModel model = convert_rope_style(model_in, arch.rope_style);
  LlamaConfig c = model.config();
  const LlamaWeights& w = model.weights();
  SG_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.n_layers, path, ": the model has ",
           w.layers.size(), " layers but its config says ", c.n_layers);
  SG_CHECK(model.tensor_parallel().size == 1, path,
           ": a tensor-parallel shard cannot be saved as a whole model");
  c.shared_classifier = detail::classifier_is_shared(w);

  detail::GgufWriter g;
  const std::string p = std::string(arch.name) + ".";
  const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };  // validated
  g.add_string("general.architecture", arch.name);
  g.add_string("general.name", "sinkgraph");
  g.add_u32("general.file_type", file_type(type));
  if (type == GgufType::q8_0 || type == GgufType::q4_0)
    g.add_u32("general.quantization_version", 2);
  g.add_u32(p + "context_length", u32(c.max_seq_len));
  g.add_u32(p + "embedding_length", u32(c.dim));
  g.add_u32(p + "block_count", u32(c.n_layers));
  g.add_u32(p + "feed_forward_length", u32(c.hidden_dim));
  g.add_u32(p + "attention.head_count", u32(c.n_heads));
  g.add_u32(p + "attention.head_count_kv", u32(c.n_kv_heads));
  g.add_u32(p + "rope.dimension_count", u32(c.head_size()));
  g.add_u32(p + "vocab_size", u32(c.vocab_size));
  g.add_f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
  g.add_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));

  for (const Slot& s : detail::weight_slots(c)) {
    const Tensor& t = detail::slot_tensor(w, s);
    const Shape want = detail::slot_shape(c, s);
    const std::string key = gguf_name(s);
    SG_CHECK(t.defined() && (t.shape() == want ||
                             (t.dtype() == DType::u8 && t.ndim() == 2 && t.shape()[0] == want[0])),
             path, ": tensor ", key, " is ", t.defined() ? t.str() : std::string("undefined"),
             " but the config needs shape ", shape_str(want));
    // Norms and biases stay f32 (as llama.cpp keeps them). A matrix whose
    // rows are not whole blocks of 32 cannot be Q8_0 or Q4_0: it is written
    // f16, as llama.cpp's converter falls back.
    GgmlType gt = want.size() == 1 ? GgmlType::f32 : ggml_type(type);
    if (detail::ggml_block_values(gt) > 1 &&
        static_cast<std::uint64_t>(want.back()) % detail::kQuantBlock != 0) {
      gt = GgmlType::f16;
    }
    // The values to write: a quantized matrix's blocks when they are of the
    // type asked for, else its (dequantized) values.
    std::vector<std::uint8_t> bytes;
    Tensor values = t;
    if (t.dtype() == DType::u8) {
      const std::string what = std::string(path).append(": tensor ").append(key);
      const auto f = quantized_format(t, want[1], what);
      const GgmlType have = f == ops::QuantFormat::q8_0 ? GgmlType::q8_0 : GgmlType::q4_0;
      bytes = detail::tensor_to_bytes(t);
      if (have != gt) {
        std::vector<float> f32(static_cast<std::size_t>(want[0] * want[1]));
        detail::dequantize_blocks(have, bytes, f32, what);
        values = Tensor::from_floats(f32, want);
        bytes.clear();
      }
    }
    if (values.dtype() != DType::u8 && (gt == GgmlType::q8_0 || gt == GgmlType::q4_0)) {
      detail::quantize_blocks(gt, values.to_floats(), bytes);
    } else if (values.dtype() != DType::u8) {
      detail::append_encoded(bytes, values,
                             gt == GgmlType::f32   ? DType::f32
                             : gt == GgmlType::f16 ? DType::f16
                                                   : DType::bf16);
    }
    std::vector<std::uint64_t> ne;
    for (int d = want.size() - 1; d >= 0; --d) ne.push_back(static_cast<std::uint64_t>(want[d]));
    g.add_tensor(key, std::move(ne), gt, std::move(bytes));
  }
  detail::write_file(path, std::span<const std::uint8_t>(g.encode()));
}

}  // namespace sinkgraph::models
