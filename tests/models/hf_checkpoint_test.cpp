// Hugging Face Llama checkpoints (docs/model.md, "Hugging Face checkpoints"
// and "sinkgraph convert"): stories260K converted to HF layout, one file or
// sharded, reproduces the llama2.c reference ids in every mode; the q/k row
// permutation against HF's conversion script's formula and against the
// llama2.c model's logits; HF config keys read and refused; index files that
// disagree with their shards; tied and untied classifiers; Qwen2's attention
// biases (permuted with their rows, sharded, refused where not written).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <stdlib.h>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sinkgraph/error.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"
#include "test_files.h"

namespace sinkgraph::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sgtest::Bytes;

const fs::path kStoriesDir = fs::path(SG_SHARED_DIR) / "models" / "stories260K";
const std::string kStories = (kStoriesDir / "stories260K.bin").string();

#define SKIP_WITHOUT_SHARED()                                                             \
  if (!fs::exists(kStories)) {                                                            \
    GTEST_SKIP() << "skipped: " << kStories << " is absent (the shared reference model)"; \
  }

using sgtest::read_bytes;
using sgtest::read_text;
using sgtest::write_bytes;
using sgtest::write_text;

using sgtest::expect_error;

// A fresh folder per test.
class TempDir : public sgtest::TempDir {
 public:
  TempDir() : sgtest::TempDir("sg_hf") {}
};

// A safetensors file as the test sees it: its JSON header and data section,
// read and written without the library.
struct StFile {
  json header;
  Bytes data;

  static StFile read(const std::string& path) {
    const Bytes raw = read_bytes(path);
    std::uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    StFile f;
    f.header = json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    f.data.assign(raw.begin() + 8 + static_cast<std::ptrdiff_t>(n), raw.end());
    return f;
  }
  [[nodiscard]] Bytes bytes() const {
    const std::string text = header.dump();
    const std::uint64_t n = text.size();
    Bytes out(8 + text.size() + data.size());
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, text.data(), text.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
    return out;
  }
  void write(const std::string& path) const { write_bytes(path, bytes()); }
  // A tensor's f32 values (the test writes f32 unless it says otherwise).
  [[nodiscard]] std::vector<float> floats(const std::string& name) const {
    const json& e = header.at(name);
    EXPECT_EQ(e.at("dtype"), "F32") << name;
    const auto begin = e.at("data_offsets")[0].get<std::size_t>();
    const auto end = e.at("data_offsets")[1].get<std::size_t>();
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), data.data() + begin, end - begin);
    return v;
  }
  // Appends tensor `name` of `other` (its entry and bytes) to this file.
  void add_from(const StFile& other, const std::string& name) {
    const json& e = other.header.at(name);
    const auto begin = e.at("data_offsets")[0].get<std::size_t>();
    const auto end = e.at("data_offsets")[1].get<std::size_t>();
    const std::size_t at = data.size();
    data.insert(data.end(), other.data.begin() + static_cast<std::ptrdiff_t>(begin),
                other.data.begin() + static_cast<std::ptrdiff_t>(end));
    header[name] = {{"dtype", e.at("dtype")},
                    {"shape", e.at("shape")},
                    {"data_offsets", {at, at + (end - begin)}}};
  }
};

LlamaConfig small_config(bool shared = true, std::int64_t kv_heads = 2) {
  LlamaConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.vocab_size = 40;
  c.max_seq_len = 16;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_style = ops::RopeStyle::interleaved;
  c.shared_classifier = shared;
  return c;
}

// Logits [P, vocab] of `tokens` from position 0, eager.
std::vector<float> logits(const LlamaModel& m, const std::vector<std::int64_t>& tokens) {
  const auto p = static_cast<std::int64_t>(tokens.size());
  const Tensor ids = Tensor::from_ints(tokens, {p});
  return m.forward(ids, SymInt(0), m.new_kv_cache(p)).to_floats();
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::vector<std::int64_t> reference_ids() { return sgtest::stories_reference_ids(kStoriesDir); }
std::vector<float> reference_logits() { return sgtest::stories_reference_logits(kStoriesDir); }

const LlamaModel& stories() {
  static const LlamaModel model = load_llama2c(kStories);
  return model;
}

// The 64 reference rows (bos_logits_64x512.f32) computed by `m`: BOS, then
// the reference ids teacher-forced.
std::vector<float> stories_logits(const LlamaModel& m) {
  GenerateOptions o;
  o.steps = 64;
  o.keep_logits = true;
  const auto want = reference_ids();
  o.forced_ids.assign(want.begin(), want.begin() + 63);
  return generate(m, o, {Mode::eager}).logits;
}

// ---- stories260K ----

TEST(models_hf, Stories260KConvertedReproducesTheReferenceInEveryMode) {
  SKIP_WITHOUT_SHARED();
  const auto want = reference_ids();
  ASSERT_EQ(want.size(), 200U);
  for (const std::int64_t shards : {1, 3}) {
    SCOPED_TRACE(std::to_string(shards) + " shard(s)");
    const TempDir dir;
    save_hf(stories(), dir.path(), DType::f32, shards);
    EXPECT_EQ(fs::exists(dir.file("model.safetensors")), shards == 1);
    EXPECT_EQ(fs::exists(dir.file("model.safetensors.index.json")), shards > 1);
    EXPECT_EQ(checkpoint_format(dir.path()), CheckpointFormat::hf);
    const LlamaModel m = load_model(dir.path());
    EXPECT_EQ(m.config().rope_style, ops::RopeStyle::half);
    EXPECT_EQ(m.config().n_kv_heads, 4);
    EXPECT_TRUE(m.weights().output.shares_storage(m.weights().tok_embeddings));
    for (const Mode mode : {Mode::eager, Mode::reduce_overhead, Mode::max_autotune}) {
      GenerateOptions o;
      o.steps = 200;
      EXPECT_EQ(generate(m, o, {mode}).ids, want) << mode_name(mode);
    }
  }
}

TEST(models_hf, ShardedIndexIsWhatTransformersReads) {
  SKIP_WITHOUT_SHARED();
  const TempDir dir;
  save_hf(stories(), dir.path(), DType::f32, 3);
  const json index = json::parse(read_text(dir.file("model.safetensors.index.json")));
  const json& map = index.at("weight_map");
  EXPECT_EQ(map.size(), 2U + 5 * 9);  // embedding, final norm, 9 per layer (the classifier is tied)
  std::uint64_t total = 0;
  std::vector<std::string> files;
  for (const auto& [name, file] : map.items()) {
    const StFile shard = StFile::read(dir.file(file.get<std::string>()));
    ASSERT_TRUE(shard.header.contains(name)) << name << " in " << file;
    const auto& off = shard.header.at(name).at("data_offsets");
    total += off[1].get<std::uint64_t>() - off[0].get<std::uint64_t>();
    files.push_back(file.get<std::string>());
  }
  EXPECT_EQ(index.at("metadata").at("total_size").get<std::uint64_t>(), total);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                             "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"}));
  const json config = json::parse(read_text(dir.file("config.json")));
  EXPECT_EQ(config.at("model_type"), "llama");
  EXPECT_EQ(config.at("architectures"), json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config.at("hidden_size"), 64);
  EXPECT_EQ(config.at("num_key_value_heads"), 4);
  EXPECT_EQ(config.at("tie_word_embeddings"), true);
  EXPECT_EQ(config.at("torch_dtype"), "float32");
  EXPECT_EQ(config.at("hidden_act"), "silu");
}

// Half-precision conversions against the f32 reference logits
// (bos_logits_64x512.f32: 64 teacher-forced positions; the largest logit
// there is 15.7). The f32 bound is the checkpoint README's for any correct f32
// implementation (1e-3; summation order alone moves logits by about 1e-4, and
// the asan build's measured 1.006e-4); the check that the conversion itself
// adds nothing is vs_ours below. docs/model.md states these bounds and the measured values
// (f16 0.084, bf16 1.39: rounding the weights, nothing else, as the same
// rounding in our own layout shows). Greedy decoding from BOS keeps the
// reference ids for the first 37 (f16) and 10 (bf16) steps.
TEST(models_hf, HalfPrecisionConversionsStayWithinTheStatedTolerance) {
  SKIP_WITHOUT_SHARED();
  const std::vector<float> want = reference_logits();
  const auto ids = reference_ids();
  struct Case {
    DType dtype;
    float tolerance;
  };
  for (const Case& c : {Case{DType::f32, 1e-3F}, Case{DType::f16, 0.1F}, Case{DType::bf16, 1.5F}}) {
    const TempDir dir;
    save_hf(stories(), dir.file("hf"), c.dtype, c.dtype == DType::bf16 ? 2 : 1);
    const std::vector<float> got = stories_logits(load_model(dir.file("hf")));
    const float diff = max_abs_diff(got, want);
    // The same rounding in our own layout (interleaved rotary, no
    // permutation): the HF model adds no error of its own.
    save_model(stories(), dir.file("ours.safetensors"), CheckpointFormat::safetensors, c.dtype);
    const float vs_ours =
        max_abs_diff(stories_logits(load_model(dir.file("ours.safetensors"))), got);
    GenerateOptions o;
    o.steps = 200;
    const auto greedy = generate(load_model(dir.file("hf")), o).ids;
    std::size_t same = 0;
    while (same < greedy.size() && greedy[same] == ids[same]) ++same;
    std::cout << "[ measured ] " << dtype_name(c.dtype)
              << ": max |logit - f32 reference| over 64 positions " << diff
              << " (vs our layout in the same dtype " << vs_ours
              << "); greedy ids match the reference for the first " << same << " of 200\n";
    EXPECT_LE(diff, c.tolerance) << dtype_name(c.dtype);
    EXPECT_LE(vs_ours, 1e-4F) << dtype_name(c.dtype);
    if (c.dtype == DType::f32) {
      EXPECT_EQ(same, 200U);
    }
  }
}

// ---- the permutation ----

// HF's convert_llama_weights_to_hf.py: permute(w, n_heads, dim1, dim2) =
// w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2),
// written out: output row (h, a, b) of view [n_heads, 2, dim1/n_heads/2] is
// input row (h, b, a) of view [n_heads, dim1/n_heads/2, 2].
std::vector<float> hf_permute(const std::vector<float>& w, std::int64_t n_heads, std::int64_t dim1,
                              std::int64_t dim2) {
  const std::int64_t half = dim1 / n_heads / 2;
  std::vector<float> out(w.size());
  for (std::int64_t h = 0; h < n_heads; ++h) {
    for (std::int64_t a = 0; a < 2; ++a) {
      for (std::int64_t b = 0; b < half; ++b) {
        const std::int64_t out_row = (h * 2 + a) * half + b;
        const std::int64_t in_row = (h * half + b) * 2 + a;
        std::copy_n(w.begin() + in_row * dim2, dim2, out.begin() + out_row * dim2);
      }
    }
  }
  return out;
}

TEST(models_hf, QkRowsArePermutedAsHfsConversionScriptDoes) {
  const LlamaModel m = random_model(small_config(false, 2), 11);
  const LlamaConfig& c = m.config();
  const TempDir dir;
  save_hf(m, dir.path(), DType::f32);
  const StFile f = StFile::read(dir.file("model.safetensors"));
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& w = m.weights().layers[static_cast<std::size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(f.floats(p + "self_attn.q_proj.weight"),
              hf_permute(w.wq.to_floats(), c.n_heads, c.dim, c.dim));
    EXPECT_EQ(f.floats(p + "self_attn.k_proj.weight"),
              hf_permute(w.wk.to_floats(), c.n_kv_heads, c.kv_dim(), c.dim));
    // Everything else is copied as is, under HF's names.
    EXPECT_EQ(f.floats(p + "self_attn.v_proj.weight"), w.wv.to_floats());
    EXPECT_EQ(f.floats(p + "self_attn.o_proj.weight"), w.wo.to_floats());
    EXPECT_EQ(f.floats(p + "mlp.gate_proj.weight"), w.w1.to_floats());
    EXPECT_EQ(f.floats(p + "mlp.down_proj.weight"), w.w2.to_floats());
    EXPECT_EQ(f.floats(p + "mlp.up_proj.weight"), w.w3.to_floats());
    EXPECT_EQ(f.floats(p + "input_layernorm.weight"), w.attention_norm.to_floats());
    EXPECT_EQ(f.floats(p + "post_attention_layernorm.weight"), w.ffn_norm.to_floats());
  }
  EXPECT_EQ(f.floats("model.embed_tokens.weight"), m.weights().tok_embeddings.to_floats());
  EXPECT_EQ(f.floats("model.norm.weight"), m.weights().norm.to_floats());
  EXPECT_EQ(f.floats("lm_head.weight"), m.weights().output.to_floats());
}

TEST(models_hf, HalfRotaryOnPermutedWeightsComputesTheInterleavedModel) {
  // The llama2.c model (interleaved pairs) is the reference; the HF model
  // runs the other rotary code on the permuted rows. Grouped-query attention
  // (kv heads < heads) so k's permutation uses its own head count.
  const std::vector<std::int64_t> tokens = {1, 7, 3, 39, 0, 12, 25, 8, 8, 30, 2, 17};
  for (const std::int64_t kv : {1, 2, 4}) {
    const LlamaModel m = random_model(small_config(true, kv), 21);
    const TempDir dir;
    save_model(m, dir.path(), CheckpointFormat::hf);
    const LlamaModel hf = load_model(dir.path());
    EXPECT_EQ(hf.config().rope_style, ops::RopeStyle::half);
    EXPECT_LE(max_abs_diff(logits(hf, tokens), logits(m, tokens)), 1e-5F) << "kv heads " << kv;
  }
}

TEST(models_hf, ConvertRopeStyleRoundTripsBitwise) {
  const LlamaModel m = random_model(small_config(false, 2), 5);
  const LlamaModel half = convert_rope_style(m, ops::RopeStyle::half);
  EXPECT_EQ(half.config().rope_style, ops::RopeStyle::half);
  EXPECT_NE(half.weights().layers[0].wq.to_floats(), m.weights().layers[0].wq.to_floats());
  EXPECT_TRUE(half.weights().layers[0].wv.shares_storage(m.weights().layers[0].wv));
  const LlamaModel back = convert_rope_style(half, ops::RopeStyle::interleaved);
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(back.weights().layers[l].wq.to_floats(), m.weights().layers[l].wq.to_floats());
    EXPECT_EQ(back.weights().layers[l].wk.to_floats(), m.weights().layers[l].wk.to_floats());
  }
  // A model already in the asked style is returned as is.
  EXPECT_TRUE(convert_rope_style(m, ops::RopeStyle::interleaved)
                  .weights()
                  .layers[0]
                  .wq.shares_storage(m.weights().layers[0].wq));
  // Our layout holds half-rotary models as they are: converting one to HF
  // permutes nothing.
  const TempDir dir;
  save_hf(half, dir.path());
  EXPECT_EQ(
      StFile::read(dir.file("model.safetensors")).floats("model.layers.1.self_attn.q_proj.weight"),
      half.weights().layers[1].wq.to_floats());
}

// ---- config.json ----

// A single-file HF checkpoint of the small model in memory, and its config.
struct HfSingle {
  Bytes bytes;
  json config;
  static HfSingle make(bool shared = true, std::int64_t kv = 2) {
    const TempDir dir;
    save_hf(random_model(small_config(shared, kv), 3), dir.path());
    return {read_bytes(dir.file("model.safetensors")),
            json::parse(read_text(dir.file("config.json")))};
  }
  [[nodiscard]] LlamaModel parse(const json& edited) const {
    return parse_safetensors(bytes, edited.dump(), "hf.safetensors");
  }
};

TEST(models_hf, ConfigKeysAreReadWithHfsDefaults) {
  const HfSingle s = HfSingle::make(true, 4);
  const LlamaConfig base = s.parse(s.config).config();
  EXPECT_EQ(base.dim, 32);
  EXPECT_EQ(base.hidden_dim, 48);
  EXPECT_EQ(base.n_layers, 2);
  EXPECT_EQ(base.n_heads, 4);
  EXPECT_EQ(base.n_kv_heads, 4);
  EXPECT_EQ(base.vocab_size, 40);
  EXPECT_EQ(base.max_seq_len, 16);
  EXPECT_EQ(base.norm_eps, 1e-5);
  EXPECT_EQ(base.rope_theta, 10000.0);
  EXPECT_EQ(base.rope_style, ops::RopeStyle::half);
  EXPECT_TRUE(base.shared_classifier);
  // Keys transformers ignores for this model, and the defaults of absent keys.
  json c = s.config;
  c["transformers_version"] = "4.44.0";
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  c["torch_dtype"] = "bfloat16";
  c["pretraining_tp"] = 1;
  c["use_cache"] = true;
  c["initializer_range"] = 0.02;
  c["something_new"] = {{"nested", {1, 2}}};
  c["rope_scaling"] = {{"rope_type", "default"}};
  c["attention_bias"] = false;
  c["head_dim"] = nullptr;
  c.erase("num_key_value_heads");
  c.erase("rms_norm_eps");
  c.erase("rope_theta");
  c.erase("hidden_act");
  c.erase("mlp_bias");
  const LlamaConfig d = s.parse(c).config();
  EXPECT_EQ(d.n_kv_heads, 4);
  EXPECT_EQ(d.norm_eps, 1e-6);
  EXPECT_EQ(d.rope_theta, 10000.0);
  c["num_key_value_heads"] = nullptr;
  c["rope_theta"] = 500000.0;
  c["rms_norm_eps"] = 1e-5;
  EXPECT_EQ(s.parse(c).config().rope_theta, 500000.0);
  // transformers 5 keeps the rotary settings in rope_parameters.
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  EXPECT_EQ(s.parse(c).config().rope_theta, 250000.0);
}

TEST(models_hf, ConfigKeysThatChangeTheMathAreRefused) {
  const HfSingle s = HfSingle::make();
  const auto expect_bad = [&](const std::function<void(json&)>& edit,
                              const std::vector<std::string>& parts) {
    json c = s.config;
    edit(c);
    expect_error([&] { (void)s.parse(c); }, parts);
  };
  expect_bad([](json& c) { c["model_type"] = "mistral"; },
             {"hf.safetensors", "model_type", "mistral"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
      },
      {"\"rope_scaling\"", "linear"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
      },
      {"\"rope_scaling\"", "llama3"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"factor", 2.0}, {"rope_type", "dynamic"}};
      },
      {"rope_scaling", "dynamic"});
  expect_bad([](json& c) { c["rope_scaling"] = "yarn"; }, {"rope_scaling"});
  expect_bad(
      [](json& c) {
        c["rope_parameters"] = {{"rope_type", "yarn"}};
      },
      {"rope_parameters", "yarn"});
  expect_bad([](json& c) { c["partial_rotary_factor"] = 0.5; }, {"partial_rotary_factor"});
  expect_bad([](json& c) { c["attention_bias"] = true; }, {"\"attention_bias\": true"});
  expect_bad([](json& c) { c["attention_bias"] = "no"; }, {"attention_bias", "true or false"});
  expect_bad([](json& c) { c["mlp_bias"] = true; }, {"\"mlp_bias\": true"});
  expect_bad([](json& c) { c["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"});
  expect_bad([](json& c) { c["head_dim"] = 16; }, {"head_dim", "16", "8"});
  expect_bad(
      [](json& c) {
        c["quantization_config"] = {{"quant_method", "gptq"}};
      },
      {"quantization_config"});
  expect_bad([](json& c) { c["tie_word_embeddings"] = 1; }, {"tie_word_embeddings"});
  expect_bad([](json& c) { c.erase("hidden_size"); }, {"missing \"hidden_size\""});
  expect_bad([](json& c) { c["intermediate_size"] = "48"; }, {"intermediate_size", "integer"});
  expect_bad([](json& c) { c["num_attention_heads"] = 3; }, {"n_heads"});
  expect_bad([](json& c) { c["rms_norm_eps"] = "small"; }, {"rms_norm_eps"});
  // A config that disagrees with the tensors: the tensor is named.
  expect_bad([](json& c) { c["num_key_value_heads"] = 4; },
             {"model.layers.0.self_attn.k_proj.weight", "shape"});
  expect_bad([](json& c) { c["num_hidden_layers"] = 1; },
             {"model.layers.1.", "not a Llama weight"});
}

// ---- Qwen2: attention biases ----

LlamaConfig bias_config(std::int64_t kv_heads = 2) {
  LlamaConfig c = small_config(false, kv_heads);
  c.attention_bias = true;
  return c;
}

TEST(models_hf, AttentionBiasesChangeTheLogits) {
  // The same weights without the biases: a forward that dropped them would
  // give these logits.
  const LlamaModel m = random_model(bias_config(), 31);
  LlamaWeights w = m.weights();
  LlamaConfig c = m.config();
  c.attention_bias = false;
  for (LlamaLayer& l : w.layers) l.bq = l.bk = l.bv = Tensor();
  const LlamaModel plain(c, w);
  const std::vector<std::int64_t> tokens = {1, 7, 3, 39, 0, 12};
  EXPECT_GT(max_abs_diff(logits(m, tokens), logits(plain, tokens)), 1e-3F);
  EXPECT_EQ(m.config().num_parameters(),
            plain.config().num_parameters() + 2 * (c.dim + 2 * c.kv_dim()));
  EXPECT_NE(m.trace_key(), plain.trace_key());
  // A model whose weights and config disagree about biases is refused.
  expect_error([&] { (void)LlamaModel(c, m.weights()); },
               {"layer 0 has attention biases", "attention_bias false"});
  LlamaConfig with = c;
  with.attention_bias = true;
  expect_error([&] { (void)LlamaModel(with, w); }, {"attention.wq.bias", "missing"});
}

TEST(models_hf, AttentionBiasesAreWrittenAsQwen2AndPermutedWithTheirRows) {
  // The interleaved model is the reference: the HF checkpoint holds permuted
  // q/k rows, and a bias entry must move with its row or every score shifts.
  const std::vector<std::int64_t> tokens = {1, 7, 3, 39, 0, 12, 25, 8, 8, 30, 2, 17};
  for (const std::int64_t kv : {1, 2, 4}) {
    SCOPED_TRACE("kv heads " + std::to_string(kv));
    const LlamaModel m = random_model(bias_config(kv), 33);
    const TempDir dir;
    save_model(m, dir.path(), CheckpointFormat::hf);
    const json config = json::parse(read_text(dir.file("config.json")));
    EXPECT_EQ(config.at("model_type"), "qwen2");
    EXPECT_EQ(config.at("architectures")[0], "Qwen2ForCausalLM");
    const StFile f = StFile::read(dir.file("model.safetensors"));
    EXPECT_EQ(f.header.at("model.layers.1.self_attn.k_proj.bias").at("shape"),
              json::array({kv * 8}));
    EXPECT_EQ(f.floats("model.layers.0.self_attn.v_proj.bias"),
              m.weights().layers[0].bv.to_floats());  // v is not rotated: as it was
    EXPECT_FALSE(f.header.contains("model.layers.0.self_attn.o_proj.bias"));
    const LlamaModel hf = load_model(dir.path());
    EXPECT_TRUE(hf.config().attention_bias);
    EXPECT_LE(max_abs_diff(logits(hf, tokens), logits(m, tokens)), 1e-5F);
  }
}

TEST(models_hf, AttentionBiasesInOurLayoutAndTheirRefusals) {
  const LlamaModel m = random_model(bias_config(), 35);
  const std::vector<std::int64_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  const TempDir dir;
  save_model(m, dir.file("ours"), CheckpointFormat::safetensors);
  EXPECT_EQ(json::parse(read_text(dir.file("ours/config.json"))).at("attention_bias"), true);
  EXPECT_EQ(logits(load_model(dir.file("ours")), tokens), logits(m, tokens));
  expect_error([&] { save_model(m, dir.file("m.bin"), CheckpointFormat::llama2c); },
               {"m.bin", "no attention biases"});
  // A bias tensor in a checkpoint whose config has none is not a weight of it.
  json plain = json::parse(read_text(dir.file("ours/config.json")));
  plain.erase("attention_bias");
  write_text(dir.file("ours/config.json"), plain.dump());
  expect_error([&] { (void)load_model(dir.file("ours")); },
               {"layers.0.attention.w", ".bias", "not a Llama weight"});
}

TEST(models_hf, Qwen2ConfigKeys) {
  const TempDir dir;
  save_hf(random_model(bias_config(), 37), dir.path());
  const Bytes bytes = read_bytes(dir.file("model.safetensors"));
  const json config = json::parse(read_text(dir.file("config.json")));
  const auto parse = [&](const json& c) {
    return parse_safetensors(bytes, c.dump(), "qwen.safetensors");
  };
  // What transformers 5 writes for a Qwen2 model of full attention.
  json c = config;
  c["layer_types"] = {"full_attention", "full_attention"};
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = 28;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const LlamaConfig read = parse(c).config();
  EXPECT_TRUE(read.attention_bias);
  EXPECT_EQ(read.rope_theta, 1000000.0);
  // A sliding window is refused, from layer_types or (older configs) the flag.
  c["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error([&] { (void)parse(c); }, {"layer_types\"[1]", "sliding_attention"});
  c["layer_types"] = "full_attention";
  expect_error([&] { (void)parse(c); }, {"layer_types", "array"});
  c.erase("layer_types");
  c["use_sliding_window"] = true;
  expect_error([&] { (void)parse(c); }, {"\"use_sliding_window\": true", "sliding window"});
  // The same tensors under a Llama config: Llama has no q/k/v biases.
  c = config;
  c["model_type"] = "llama";
  expect_error([&] { (void)parse(c); }, {"self_attn.", "_proj.bias", "not a Llama weight"});
}

TEST(models_hf, AttentionBiasesUnderTensorParallelismAndInEveryMode) {
  const LlamaModel m = random_model(bias_config(), 39);
  const TempDir dir;
  save_hf(m, dir.path(), DType::f32, 3);
  const LlamaModel whole = load_model(dir.path());
  for (const std::int64_t rank : {0, 1}) {
    const TensorParallel tp{0, rank, 2, ClassifierSplit::vocab};
    const LlamaModel loaded = load_model(dir.path(), tp);
    const LlamaModel cut = shard_model(whole, tp);
    for (std::size_t l = 0; l < 2; ++l) {
      const LlamaLayer& a = loaded.weights().layers[l];
      const LlamaLayer& b = cut.weights().layers[l];
      EXPECT_EQ(a.bq.shape(), Shape({16}));
      EXPECT_EQ(a.bk.shape(), Shape({8}));
      EXPECT_EQ(a.bq.to_floats(), b.bq.to_floats());
      EXPECT_EQ(a.bk.to_floats(), b.bk.to_floats());
      EXPECT_EQ(a.bv.to_floats(), b.bv.to_floats());
    }
  }
  GenerateOptions o;
  o.steps = 12;
  const auto want = generate(whole, o, {Mode::eager}).ids;
  for (const Mode mode : {Mode::reduce_overhead, Mode::max_autotune}) {
    EXPECT_EQ(generate(whole, o, {mode}).ids, want) << mode_name(mode);
  }
}

// ---- the classifier ----

TEST(models_hf, TiedAndUntiedClassifiers) {
  for (const bool shared : {true, false}) {
    const LlamaModel m = random_model(small_config(shared), 8);
    const TempDir dir;
    save_hf(m, dir.path());
    EXPECT_EQ(json::parse(read_text(dir.file("config.json"))).at("tie_word_embeddings"), shared);
    EXPECT_EQ(StFile::read(dir.file("model.safetensors")).header.contains("lm_head.weight"),
              !shared);
    const LlamaModel back = load_model(dir.path());
    EXPECT_EQ(back.config().shared_classifier, shared);
    EXPECT_EQ(back.weights().output.shares_storage(back.weights().tok_embeddings), shared);
    EXPECT_EQ(back.weights().output.to_floats(), m.weights().output.to_floats());
  }
  // Untied in the config but no lm_head.weight in the file.
  HfSingle tied = HfSingle::make(true);
  json c = tied.config;
  c["tie_word_embeddings"] = false;
  expect_error([&] { (void)tied.parse(c); }, {"hf.safetensors", "missing tensor lm_head.weight"});
  c.erase("tie_word_embeddings");  // transformers' default is untied
  expect_error([&] { (void)tied.parse(c); }, {"missing tensor lm_head.weight"});
  // Tied, with a copy of the embedding stored as lm_head.weight: accepted when
  // it equals the embedding, refused when it differs.
  const HfSingle untied = HfSingle::make(false);
  c = untied.config;
  c["tie_word_embeddings"] = true;
  expect_error([&] { (void)untied.parse(c); },
               {"lm_head.weight differs from model.embed_tokens.weight", "tie_word_embeddings"});
  StFile f;
  {
    const TempDir dir;
    write_bytes(dir.file("m.safetensors"), tied.bytes);
    f = StFile::read(dir.file("m.safetensors"));
  }
  StFile copy = f;
  copy.add_from(f, "model.embed_tokens.weight");
  copy.header["lm_head.weight"] = copy.header["model.embed_tokens.weight"];
  copy.header["lm_head.weight"]["data_offsets"] = {f.data.size(), copy.data.size()};
  copy.header["model.embed_tokens.weight"] = f.header["model.embed_tokens.weight"];
  const LlamaModel loaded = parse_safetensors(copy.bytes(), tied.config.dump(), "copy");
  EXPECT_TRUE(loaded.weights().output.shares_storage(loaded.weights().tok_embeddings));
}

TEST(models_hf, OlderCheckpointsRotaryBuffersAreIgnored) {
  const HfSingle s = HfSingle::make();
  StFile f;
  {
    const TempDir dir;
    write_bytes(dir.file("m.safetensors"), s.bytes);
    f = StFile::read(dir.file("m.safetensors"));
  }
  const std::size_t at = f.data.size();
  f.data.resize(at + 4 * 4);  // [head_dim / 2] f32
  f.header["model.layers.1.self_attn.rotary_emb.inv_freq"] = {
      {"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {at, at + 16}}};
  EXPECT_EQ(parse_safetensors(f.bytes(), s.config.dump(), "old").config().n_layers, 2);
  // Ignored, but checked: a NaN in it is a damaged file (bf16 here).
  f.header["model.layers.1.self_attn.rotary_emb.inv_freq"] = {
      {"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {at, at + 8}}};
  f.data.resize(at + 8);
  EXPECT_EQ(parse_safetensors(f.bytes(), s.config.dump(), "old").config().n_layers, 2);
  f.data[at + 4] = 0xC0, f.data[at + 5] = 0x7F;  // index 2: 0x7FC0, a bf16 NaN
  expect_error([&] { (void)parse_safetensors(f.bytes(), s.config.dump(), "old"); },
               {"old", "rotary_emb.inv_freq", "not finite (nan) at index 2 of 4"});
  f.header["model.layers.1.self_attn.rotary_emb.inv_freq"]["shape"] = {2, 2};
  expect_error([&] { (void)parse_safetensors(f.bytes(), s.config.dump(), "old"); },
               {"rotary_emb.inv_freq", "shape"});
}

// ---- sharded checkpoints ----

// A 3-shard HF checkpoint of the small model in a temporary folder.
struct Sharded {
  TempDir dir;
  LlamaModel model = random_model(small_config(false), 13);
  Sharded() { save_hf(model, dir.path(), DType::f32, 3); }
  [[nodiscard]] std::string index_path() const { return dir.file("model.safetensors.index.json"); }
  [[nodiscard]] json index() const { return json::parse(read_text(index_path())); }
  void set_index(const json& j) const { write_text(index_path(), j.dump()); }
  [[nodiscard]] std::string shard(int k) const {
    return dir.file("model-0000" + std::to_string(k) + "-of-00003.safetensors");
  }
};

TEST(models_hf, ShardedCheckpointLoadsFromTheFolderOrTheIndex) {
  const Sharded s;
  const auto same = [&](const LlamaModel& m) {
    EXPECT_EQ(m.weights().output.to_floats(), s.model.weights().output.to_floats());
    EXPECT_EQ(m.weights().layers[1].w2.to_floats(), s.model.weights().layers[1].w2.to_floats());
    EXPECT_EQ(m.weights().layers[1].wk.to_floats(),
              convert_rope_style(s.model, ops::RopeStyle::half).weights().layers[1].wk.to_floats());
  };
  same(load_model(s.dir.path()));
  same(load_model(s.index_path()));
  EXPECT_EQ(checkpoint_format(s.index_path()), CheckpointFormat::hf);
  // Files of a previous save with another sharding are removed: the folder
  // holds one checkpoint.
  save_hf(s.model, s.dir.path(), DType::f32, 2);
  EXPECT_FALSE(fs::exists(s.shard(3)));
  EXPECT_TRUE(fs::exists(s.dir.file("model-00002-of-00002.safetensors")));
  save_hf(s.model, s.dir.path(), DType::bf16, 1);
  EXPECT_FALSE(fs::exists(s.index_path()));
  EXPECT_FALSE(fs::exists(s.dir.file("model-00001-of-00002.safetensors")));
  EXPECT_EQ(json::parse(read_text(s.dir.file("config.json"))).at("torch_dtype"), "bfloat16");
  save_hf(s.model, s.dir.path(), DType::f32, 3);
  EXPECT_FALSE(fs::exists(s.dir.file("model.safetensors")));
  same(load_model(s.dir.path()));
}

TEST(models_hf, IndexThatDisagreesWithItsShardsIsAnError) {
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight";
  // Missing shard.
  {
    const Sharded s;
    fs::remove(s.shard(2));
    expect_error([&] { load_model(s.dir.path()); },
                 {s.index_path(), "model-00002-of-00003.safetensors", "No such file"});
  }
  // A tensor in two shards: the weight_map says one, the other's header has it too.
  {
    const Sharded s;
    const json index = s.index();
    const std::string home = index.at("weight_map").at(q0);
    const std::string other = home == "model-00001-of-00003.safetensors"
                                  ? "model-00003-of-00003.safetensors"
                                  : "model-00001-of-00003.safetensors";
    StFile f = StFile::read(s.dir.file(other));
    f.add_from(StFile::read(s.dir.file(home)), q0);
    f.write(s.dir.file(other));
    expect_error([&] { load_model(s.dir.path()); },
                 {other, q0, "the weight_map of", s.index_path(), "puts it in " + home});
  }
  // The weight_map points a tensor at a shard whose header does not hold it.
  {
    const Sharded s;
    json index = s.index();
    const std::string home = index["weight_map"][q0];
    index["weight_map"][q0] = home == "model-00002-of-00003.safetensors"
                                  ? "model-00001-of-00003.safetensors"
                                  : "model-00002-of-00003.safetensors";
    s.set_index(index);
    expect_error([&] { load_model(s.dir.path()); }, {home, q0, "puts it in"});
  }
  // A tensor in a shard that the weight_map does not list.
  {
    const Sharded s;
    json index = s.index();
    const std::string home = index["weight_map"][q0];
    index["weight_map"].erase(q0);
    s.set_index(index);
    expect_error([&] { load_model(s.dir.path()); }, {home, q0, "is not in the weight_map"});
  }
  // A weight_map entry no header holds (a shard that lost a tensor).
  {
    const Sharded s;
    const std::string home = s.index()["weight_map"][q0];
    StFile f = StFile::read(s.dir.file(home));
    f.header.erase(q0);
    f.write(s.dir.file(home));
    expect_error([&] { load_model(s.dir.path()); },
                 {s.index_path(), q0, home, "whose header does not hold it"});
  }
  // Names and shapes.
  const auto expect_bad_index = [](const std::function<void(json&)>& edit,
                                   const std::vector<std::string>& parts) {
    const Sharded s;
    json index = s.index();
    edit(index);
    s.set_index(index);
    std::vector<std::string> all = parts;
    all.push_back(s.index_path());
    expect_error([&] { load_model(s.dir.path()); }, all);
  };
  expect_bad_index(
      [](json& j) {
        j["weight_map"]["model.layers.0.self_attn.q_proj.bias"] =
            "model-00001-of-00003.safetensors";
      },
      {"model.layers.0.self_attn.q_proj.bias", "not a Llama weight"});
  expect_bad_index(
      [](json& j) { j["weight_map"]["rope.freqs"] = "model-00001-of-00003.safetensors"; },
      {"rope.freqs", "not a Llama weight"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = "../model-00001-of-00003.safetensors"; },
                   {"not a plain file name", q0});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = "/etc/passwd.safetensors"; },
                   {"not a plain file name"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = "sub/x.safetensors"; },
                   {"not a plain file name"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = ".."; }, {"not a plain file name"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = ""; }, {"not a plain file name"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = "pytorch_model.bin"; },
                   {"not a .safetensors file"});
  expect_bad_index([&](json& j) { j["weight_map"][q0] = 3; }, {"must be a shard file name"});
  expect_bad_index([](json& j) { j["weight_map"] = json::array(); },
                   {"\"weight_map\" must be an object"});
  expect_bad_index([](json& j) { j.erase("weight_map"); }, {"missing \"weight_map\""});
  expect_bad_index([](json& j) { j["metadata"] = 5; }, {"\"metadata\" must be an object"});
  expect_bad_index([](json& j) { j = json::array(); }, {"must be a JSON object"});
  // Malformed JSON and duplicate keys in the index.
  {
    const Sharded s;
    write_text(s.index_path(), "{\"weight_map\": {");
    expect_error([&] { load_model(s.dir.path()); }, {s.index_path(), "malformed JSON"});
    write_text(
        s.index_path(),
        R"({"weight_map": {"lm_head.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}})");
    expect_error([&] { load_model(s.dir.path()); }, {s.index_path(), "\"lm_head.weight\" twice"});
  }
  // A shard's own problems name the shard.
  {
    const Sharded s;
    StFile f = StFile::read(s.shard(3));
    f.data.resize(f.data.size() + 4);
    f.write(s.shard(3));
    expect_error([&] { load_model(s.dir.path()); }, {s.shard(3), "belong to no tensor"});
  }
  // Our own layout has no sharded form.
  {
    const Sharded s;
    save_model(s.model, s.dir.file("ours.safetensors"), CheckpointFormat::safetensors);
    expect_error([&] { load_model(s.dir.path()); }, {"Hugging Face config.json", "model_type"});
  }
}

// ---- layouts side by side ----

TEST(models_hf, OurLayoutStillLoadsAndFormatsAreTold) {
  const LlamaModel m = random_model(small_config(), 4);
  const TempDir dir;
  fs::create_directories(dir.file("ours"));
  save_model(m, dir.file("ours"), CheckpointFormat::safetensors);
  save_model(m, dir.file("m.bin"), CheckpointFormat::llama2c);
  save_model(m, dir.file("hf"), CheckpointFormat::hf, DType::f16);
  EXPECT_EQ(checkpoint_format(dir.file("ours")), CheckpointFormat::safetensors);
  EXPECT_EQ(checkpoint_format(dir.file("ours/model.safetensors")), CheckpointFormat::safetensors);
  EXPECT_EQ(checkpoint_format(dir.file("m.bin")), CheckpointFormat::llama2c);
  EXPECT_EQ(checkpoint_format(dir.file("hf")), CheckpointFormat::hf);
  EXPECT_EQ(checkpoint_format(dir.file("hf/model.safetensors")), CheckpointFormat::hf);
  const std::vector<std::int64_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<float> want = logits(m, tokens);
  EXPECT_EQ(logits(load_model(dir.file("ours")), tokens), want);
  EXPECT_EQ(logits(load_model(dir.file("m.bin")), tokens), want);
  // f16 weights: close, not equal.
  const LlamaModel hf = load_model(dir.file("hf"));
  EXPECT_EQ(hf.weights().layers[0].w1.to_floats()[5],
            f16_to_f32(f32_to_f16(m.weights().layers[0].w1.to_floats()[5])));
  EXPECT_LE(max_abs_diff(logits(hf, tokens), want), 1e-2F);
  expect_error([&] { (void)checkpoint_format(dir.file("nowhere")); }, {"nowhere"});
}

TEST(models_hf, WriterRefusesWhatItCannotWrite) {
  const LlamaModel m = random_model(small_config(), 4);
  const TempDir dir;
  expect_error([&] { save_hf(m, dir.file("a"), DType::f32, 0); }, {"shard count", "0"});
  // 2 layers * 9 + embedding + norm: 20 tensors.
  expect_error([&] { save_hf(m, dir.file("a"), DType::f32, 21); }, {"21 shards for 20 tensors"});
  expect_error([&] { save_hf(m, dir.file("a"), DType::i32); }, {"i32"});
  write_text(dir.file("file"), "x");
  expect_error([&] { save_hf(m, dir.file("file")); }, {"file", "cannot create this folder"});
  EXPECT_FALSE(fs::exists(dir.file("a")));
  save_hf(m, dir.file("a"), DType::f32, 20);  // one tensor per shard
  EXPECT_EQ(load_model(dir.file("a")).weights().norm.to_floats(), m.weights().norm.to_floats());
}

}  // namespace
}  // namespace sinkgraph::models
