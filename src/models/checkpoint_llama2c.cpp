// The llama2.c "legacy" (version 0) checkpoint: a 7-int32 header, then f32
// tensors stacked over layers (docs/model.md, ../shared/models/stories260K/README.md).
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/checkpoint_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::models {
namespace {

constexpr std::uint64_t kHeaderBytes = 7 * sizeof(std::int32_t);

// One tensor of the file: its name for messages, where it lies, its shape and
// its slot in the weights (null for the unused freq_cis tables, or when
// walking without weights). T is Tensor (reading) or const Tensor (writing).
template <typename T>
struct Segment {
  std::string name;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  Shape shape;
  T* slot = nullptr;
  Tensor LlamaLayer::*member = nullptr;  // the layer field, for a layer's tensor
};

// A layer field: its llama2.c name and the LlamaLayer member it fills.
struct LayerField {
  const char* name;
  Tensor LlamaLayer::*member;
};

// Walks the file's tensors in order; `fn` returns false to stop. With
// `weights` null the slots stay null (used to locate an error before
// anything is allocated). W is LlamaWeights or const LlamaWeights.
template <typename W, typename Fn>
void for_each_segment(const LlamaConfig& c, W* weights, Fn&& fn) {
  using T = std::conditional_t<std::is_const_v<W>, const Tensor, Tensor>;
  std::uint64_t offset = kHeaderBytes;
  auto emit = [&](std::string name, Shape shape, T* slot, Tensor LlamaLayer::*member = nullptr) {
    std::uint64_t n = 1;
    for (const std::int64_t d : shape) n = detail::sat_mul(n, static_cast<std::uint64_t>(d));
    Segment<T> s{std::move(name), offset, detail::sat_mul(n, 4), shape, slot, member};
    offset = detail::sat_add(offset, s.nbytes);
    return fn(std::move(s));
  };
  const std::int64_t hs = c.head_size();
  const std::int64_t kv = c.kv_dim();
  if (!emit("token_embedding", {c.vocab_size, c.dim},
            weights ? &weights->tok_embeddings : nullptr)) {
    return;
  }
  const LayerField fields[] = {{"rms_att_weight", &LlamaLayer::attention_norm},
                               {"wq", &LlamaLayer::wq},
                               {"wk", &LlamaLayer::wk},
                               {"wv", &LlamaLayer::wv},
                               {"wo", &LlamaLayer::wo},
                               {"rms_ffn_weight", &LlamaLayer::ffn_norm},
                               {"w1", &LlamaLayer::w1},
                               {"w2", &LlamaLayer::w2},
                               {"w3", &LlamaLayer::w3}};
  const Shape shapes[] = {
      {c.dim}, {c.dim, c.dim},        {kv, c.dim},           {kv, c.dim},          {c.dim, c.dim},
      {c.dim}, {c.hidden_dim, c.dim}, {c.dim, c.hidden_dim}, {c.hidden_dim, c.dim}};
  for (std::size_t f = 0; f < std::size(fields); ++f) {
    for (std::int64_t l = 0; l < c.n_layers; ++l) {
      T* slot =
          weights ? &(weights->layers[static_cast<std::size_t>(l)].*(fields[f].member)) : nullptr;
      if (!emit("layers." + std::to_string(l) + "." + fields[f].name, shapes[f], slot,
                fields[f].member)) {
        return;
      }
    }
  }
  if (!emit("rms_final_weight", {c.dim}, weights ? &weights->norm : nullptr)) return;
  if (!emit("freq_cis_real", {c.max_seq_len, hs / 2}, nullptr)) return;
  if (!emit("freq_cis_imag", {c.max_seq_len, hs / 2}, nullptr)) return;
  if (!c.shared_classifier)
    emit("wcls", {c.vocab_size, c.dim}, weights ? &weights->output : nullptr);
}

// The file size the header implies, saturating (closed form: no walk).
std::uint64_t expected_bytes(const LlamaConfig& c) {
  using detail::sat_add;
  using detail::sat_mul;
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const std::uint64_t dim = u(c.dim);
  const std::uint64_t kv = u(c.kv_dim());
  const std::uint64_t hidden = u(c.hidden_dim);
  std::uint64_t per_layer = sat_mul(2, dim);                         // norms
  per_layer = sat_add(per_layer, sat_mul(2, sat_mul(dim, dim)));     // wq, wo
  per_layer = sat_add(per_layer, sat_mul(2, sat_mul(kv, dim)));      // wk, wv
  per_layer = sat_add(per_layer, sat_mul(3, sat_mul(hidden, dim)));  // w1, w2, w3
  const std::uint64_t embed = sat_mul(u(c.vocab_size), dim);
  std::uint64_t floats = sat_add(embed, sat_mul(u(c.n_layers), per_layer));
  floats = sat_add(floats, dim);
  floats = sat_add(floats, sat_mul(2, sat_mul(u(c.max_seq_len), u(c.head_size() / 2))));
  if (!c.shared_classifier) floats = sat_add(floats, embed);
  return sat_add(kHeaderBytes, sat_mul(4, floats));
}

}  // namespace

LlamaModel parse_llama2c(std::span<const std::uint8_t> bytes, const std::string& name,
                         const TensorParallel& tp) {
  SG_CHECK(bytes.size() >= kHeaderBytes, name, ": the file has ", bytes.size(),
           " bytes, too short for the llama2.c header (7 int32, ", kHeaderBytes, " bytes)");
  std::int64_t h[7];
  const char* header_names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                 "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    h[i] = detail::read_i32(bytes, 4 * static_cast<std::uint64_t>(i), name,
                            std::string("header field ") + header_names[i]);
  }
  LlamaConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab_size = std::abs(h[5]);  // negative: the classifier follows at the end
  c.max_seq_len = h[6];
  c.shared_classifier = h[5] > 0;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_style = ops::RopeStyle::interleaved;
  detail::validate_config(c, name);

  const std::uint64_t want = expected_bytes(c);
  const std::uint64_t have = bytes.size();
  if (want > have) {
    // Name the first tensor that does not fit; the walk stops there, so it
    // never visits more than have / 4 tensors.
    std::string message;
    for_each_segment(c, static_cast<const LlamaWeights*>(nullptr), [&](Segment<const Tensor>&& s) {
      if (s.offset <= have && s.nbytes <= have - s.offset) return true;
      message = ::sinkgraph::detail::concat(name, ": tensor ", s.name, " needs ", s.nbytes,
                                            " bytes at offset ", s.offset, " but the file has ",
                                            have, " bytes");
      return false;
    });
    SG_CHECK(false, message, " (the header says ", c.str(), ": ", want, " bytes in all)");
  }
  SG_CHECK(want == have, name, ": ", have - want,
           " trailing bytes after the last tensor: the header (", c.str(), ") implies ", want,
           " bytes but the file has ", have);

  detail::check_split(c, tp);  // before anything is decoded
  LlamaWeights weights;
  weights.layers.resize(static_cast<std::size_t>(c.n_layers));
  for_each_segment(c, &weights, [&](Segment<Tensor>&& s) {
    const auto raw = detail::checked_range(bytes, s.offset, s.nbytes, name, "tensor " + s.name);
    const std::string what = name + ": tensor " + s.name;
    if (s.slot == nullptr) {  // the freq_cis tables
      detail::check_unused_tensor(raw, DType::f32, what);
      return true;
    }
    const auto slice = s.member != nullptr         ? detail::shard_slice(c, tp, s.member)
                       : s.slot == &weights.output ? detail::classifier_slice(c, tp)
                                                   : std::nullopt;
    *s.slot = slice ? detail::decode_tensor_slice(raw, DType::f32, s.shape, *slice, what)
                    : detail::decode_tensor(raw, DType::f32, s.shape, what);
    return true;
  });
  if (c.shared_classifier) weights.output = weights.tok_embeddings;
  return LlamaModel(c, std::move(weights), tp);
}

LlamaModel load_llama2c(const std::string& path, const TensorParallel& tp) {
  const detail::FileBytes file(path);
  return parse_llama2c(file.bytes(), path, tp);
}

namespace detail {

void save_llama2c(const LlamaModel& model, const std::string& path, DType dtype) {
  SG_CHECK(dtype == DType::f32, path, ": the llama2.c format stores f32 only, not ",
           dtype_name(dtype), " (use safetensors for f16/bf16)");
  LlamaConfig c = model.config();
  SG_CHECK(
      c.rope_style == ops::RopeStyle::interleaved && c.rope_theta == 10000.0 && c.norm_eps == 1e-5,
      path, ": the llama2.c format implies interleaved rope, rope_theta 10000 and norm_eps ",
      "1e-5; this model has ", c.str(), " (use safetensors)");
  SG_CHECK(!c.attention_bias, path,
           ": the llama2.c format has no attention biases; this model has them (use safetensors "
           "or --to hf)");
  const LlamaWeights& w = model.weights();
  c.shared_classifier = classifier_is_shared(w);
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t values[7] = {c.dim,        c.hidden_dim,
                                  c.n_layers,   c.n_heads,
                                  c.n_kv_heads, c.shared_classifier ? c.vocab_size : -c.vocab_size,
                                  c.max_seq_len};
  for (const std::int64_t v : values) {
    SG_CHECK(v >= -kMax && v <= kMax, path, ": config value ", v,
             " does not fit the llama2.c int32 header (", c.str(), ")");
  }
  SG_CHECK(static_cast<std::int64_t>(w.layers.size()) == c.n_layers, path, ": the model has ",
           w.layers.size(), " layers but its config says ", c.n_layers);

  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(expected_bytes(c)));
  for (const std::int64_t v : values) append_i32(out, static_cast<std::int32_t>(v));
  for_each_segment(c, &w, [&](Segment<const Tensor>&& s) {
    SG_ASSERT(out.size() == s.offset, "save_llama2c: ", s.name, " at ", out.size());
    if (s.slot == nullptr) {  // the legacy freq_cis tables, unused by readers: zeros
      out.resize(out.size() + s.nbytes, 0);
      return true;
    }
    const Tensor& t = *s.slot;
    SG_CHECK(t.defined() && t.shape() == s.shape, path, ": tensor ", s.name, " is ",
             t.defined() ? t.str() : std::string("undefined"), " but the config needs shape ",
             shape_str(s.shape));
    append_encoded(out, t, DType::f32);
    return true;
  });
  SG_ASSERT(out.size() == expected_bytes(c), "save_llama2c: wrote ", out.size(), " bytes");
  write_file(path, std::span<const std::uint8_t>(out));
}

}  // namespace detail
}  // namespace sinkgraph::models
