// GGUF checkpoints (src/models/checkpoint_gguf.cpp): round trips in every
// type against naive references written here from ggml's block layouts, the
// rotary layout of each architecture, tensor-parallel loads, and hostile
// files built byte by byte by an independent writer in this file.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "models/test_files.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"

namespace {

namespace sg = sinkgraph;
using sg::models::GgufType;
using sg::models::LlamaConfig;
using sg::models::LlamaModel;
using sgtest::Bytes;
using sgtest::expect_error;

LlamaConfig config(sg::ops::RopeStyle style = sg::ops::RopeStyle::interleaved, bool shared = true,
                   std::int64_t hidden = 64) {
  LlamaConfig c;
  c.dim = 32;
  c.hidden_dim = hidden;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.rope_style = style;
  c.shared_classifier = shared;
  return c;
}

// Every weight of a model with its name, in a fixed order.
std::vector<std::pair<std::string, sg::Tensor>> weights_of(const LlamaModel& m) {
  const auto& w = m.weights();
  std::vector<std::pair<std::string, sg::Tensor>> out{{"embedding", w.tok_embeddings}};
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const auto& x = w.layers[l];
    const std::string p = std::to_string(l) + ".";
    for (const auto& [n, t] : {std::pair{"attention_norm", x.attention_norm},
                               {"wq", x.wq},
                               {"wk", x.wk},
                               {"wv", x.wv},
                               {"wo", x.wo},
                               {"ffn_norm", x.ffn_norm},
                               {"w1", x.w1},
                               {"w2", x.w2},
                               {"w3", x.w3},
                               {"bq", x.bq},
                               {"bk", x.bk},
                               {"bv", x.bv}}) {
      if (t.defined()) out.emplace_back(p + n, t);
    }
  }
  out.emplace_back("norm", w.norm);
  out.emplace_back("output", w.output);
  return out;
}

// ggml's reference Q8_0 / Q4_0 (quantize_row_*_ref, dequantize_row_*),
// written out naively per value: what a loaded weight must equal.
float q8_0_round_trip(const std::vector<float>& row, std::size_t i) {
  const std::size_t b = i / 32 * 32;
  float amax = 0;
  for (std::size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(row[j]));
  const float d = amax / 127.0F;
  const float id = d != 0 ? 1.0F / d : 0.0F;
  const volatile float scaled = row[i] * id;  // no FMA, as ggml rounds it
  const auto q = static_cast<std::int8_t>(std::roundf(scaled));
  return sg::f16_to_f32(sg::f32_to_f16(d)) * static_cast<float>(q);
}

float q4_0_round_trip(const std::vector<float>& row, std::size_t i) {
  const std::size_t b = i / 32 * 32;
  float amax = 0;
  float max = 0;
  for (std::size_t j = b; j < b + 32; ++j) {
    if (amax < std::fabs(row[j])) {
      amax = std::fabs(row[j]);
      max = row[j];
    }
  }
  const float d = max / -8.0F;
  const float id = d != 0 ? 1.0F / d : 0.0F;
  const volatile float scaled = row[i] * id;
  const int q = std::min(15, static_cast<int>(static_cast<std::int8_t>(scaled + 8.5F)));
  return sg::f16_to_f32(sg::f32_to_f16(d)) * static_cast<float>(q - 8);
}

// What `type` makes of tensor `t`'s values: 1-D tensors stay f32, matrices
// whose rows are not whole blocks fall back to f16 (save_gguf's rule).
std::vector<float> expected_values(const sg::Tensor& t, GgufType type) {
  std::vector<float> v = t.to_floats();
  if (t.shape().size() == 1 || type == GgufType::f32) return v;
  const bool blocks = t.shape()[1] % 32 == 0;
  if (type == GgufType::f16 || ((type == GgufType::q8_0 || type == GgufType::q4_0) && !blocks)) {
    for (float& x : v) x = sg::f16_to_f32(sg::f32_to_f16(x));
    return v;
  }
  if (type == GgufType::bf16) {
    for (float& x : v) x = sg::bf16_to_f32(sg::f32_to_bf16(x));
    return v;
  }
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = type == GgufType::q8_0 ? q8_0_round_trip(v, i) : q4_0_round_trip(v, i);
  return out;
}

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::f32:
      return "f32";
    case GgufType::f16:
      return "f16";
    case GgufType::bf16:
      return "bf16";
    case GgufType::q8_0:
      return "q8_0";
    case GgufType::q4_0:
      return "q4_0";
  }
  return "?";
}

TEST(models_gguf, every_type_round_trips_to_what_ggml_would_store) {
  const sgtest::TempDir dir("sg_gguf");
  // hidden 48: w2's rows (48 values) are not whole blocks, so it falls back.
  for (const std::int64_t hidden : {64, 48}) {
    const LlamaModel m = sg::models::random_model(config({}, false, hidden), 3);
    for (const GgufType type :
         {GgufType::f32, GgufType::f16, GgufType::bf16, GgufType::q8_0, GgufType::q4_0}) {
      SCOPED_TRACE(std::string(type_name(type)) + " hidden " + std::to_string(hidden));
      const std::string path = dir.file(std::string("m_") + type_name(type) + ".gguf");
      sg::models::save_gguf(m, path, type);
      EXPECT_EQ(sg::models::checkpoint_format(path), sg::models::CheckpointFormat::gguf);
      const LlamaModel loaded = sg::models::load_model(path);
      // Q8_0 and Q4_0 matrices stay blocks (Note [Quantized weights]); their
      // values are what the blocks decode to.
      EXPECT_EQ(sg::models::is_quantized(loaded), type == GgufType::q8_0 || type == GgufType::q4_0);
      const LlamaModel back = sg::models::dequantize_model(loaded);
      const LlamaConfig& a = m.config();
      const LlamaConfig& b = back.config();
      EXPECT_EQ(b.str(), a.str());
      EXPECT_EQ(b.norm_eps, a.norm_eps);  // 1e-5, though stored as f32
      EXPECT_EQ(b.rope_theta, a.rope_theta);
      const auto wa = weights_of(m);
      const auto wb = weights_of(back);
      ASSERT_EQ(wa.size(), wb.size());
      for (std::size_t i = 0; i < wa.size(); ++i) {
        const std::vector<float> want = expected_values(wa[i].second, type);
        const std::vector<float> got = wb[i].second.to_floats();
        ASSERT_EQ(want.size(), got.size()) << wa[i].first;
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << wa[i].first;
      }
    }
  }
}

// Logits of one forward pass over a few tokens, eagerly.
std::vector<float> logits(const LlamaModel& m) {
  const sg::Tensor tokens = sg::Tensor::from_ints({1, 7, 3, 12}, {4});
  return m.forward(tokens, 0, m.new_kv_cache()).to_floats();
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, tol);
}

TEST(models_gguf, each_architecture_keeps_its_rotary_layout) {
  const sgtest::TempDir dir("sg_gguf");
  // A half-split Llama is written as "llama" (rows permuted to interleaved
  // pairs) and computes the same logits; a model with attention biases is
  // "qwen2" and keeps its layout, bitwise.
  const LlamaModel half = sg::models::random_model(config(sg::ops::RopeStyle::half), 5);
  sg::models::save_gguf(half, dir.file("h.gguf"));
  const LlamaModel h = sg::models::load_gguf(dir.file("h.gguf"));
  EXPECT_EQ(h.config().rope_style, sg::ops::RopeStyle::interleaved);
  expect_close(logits(h), logits(half), 1e-5F);

  LlamaConfig qc = config(sg::ops::RopeStyle::half);
  qc.attention_bias = true;
  const LlamaModel qwen = sg::models::random_model(qc, 6);
  sg::models::save_gguf(qwen, dir.file("q.gguf"));
  const LlamaModel q = sg::models::load_gguf(dir.file("q.gguf"));
  EXPECT_EQ(q.config().str(), qwen.config().str());
  EXPECT_EQ(logits(q), logits(qwen));
}

TEST(models_gguf, a_rank_loads_only_its_shard_in_every_type) {
  const sgtest::TempDir dir("sg_gguf");
  const LlamaModel m = sg::models::random_model(config({}, false), 8);
  for (const GgufType type : {GgufType::f32, GgufType::q8_0, GgufType::q4_0}) {
    SCOPED_TRACE(type_name(type));
    const std::string path = dir.file(std::string("m_") + type_name(type) + ".gguf");
    sg::models::save_gguf(m, path, type);
    // A rank's Q8_0/Q4_0 slices are dequantized at load: the same values as
    // the whole file's blocks.
    const LlamaModel whole = sg::models::dequantize_model(sg::models::load_model(path));
    for (std::int64_t rank = 0; rank < 2; ++rank) {
      const sg::models::TensorParallel tp{0, rank, 2};
      const LlamaModel loaded = sg::models::load_model(path, tp);
      const LlamaModel cut = sg::models::shard_model(whole, tp);
      const auto a = weights_of(cut);
      const auto b = weights_of(loaded);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(a[i].second.to_floats(), b[i].second.to_floats()) << a[i].first;
      EXPECT_EQ(loaded.weight_bytes(), cut.weight_bytes());
    }
  }
}

// Generated ids of `m` in `mode`.
std::vector<std::int64_t> ids(const LlamaModel& m, sg::Mode mode) {
  sg::GenerateOptions o;
  o.prompt = {1, 5, 9};
  o.steps = 8;
  sg::GeneratorConfig config;
  config.mode = mode;
  return sg::generate(m, o, config).ids;
}

TEST(models_gguf, quantized_weights_are_computed_on_in_place_in_every_mode) {
  const sgtest::TempDir dir("sg_gguf");
  const LlamaModel m = sg::models::random_model(config({}, false), 12);
  for (const auto format : {sg::ops::QuantFormat::q8_0, sg::ops::QuantFormat::q4_0}) {
    const bool q8 = format == sg::ops::QuantFormat::q8_0;
    SCOPED_TRACE(q8 ? "q8_0" : "q4_0");
    const std::string path = dir.file(q8 ? "q8.gguf" : "q4.gguf");
    sg::models::save_gguf(m, path, q8 ? GgufType::q8_0 : GgufType::q4_0);
    const LlamaModel loaded = sg::models::load_model(path);
    const LlamaModel quantized = sg::models::quantize_model(m, format);
    // The file's blocks and quantize_model's are the same bytes: written
    // back as they are, the file is the same file.
    sg::models::save_gguf(quantized, dir.file("again.gguf"), q8 ? GgufType::q8_0 : GgufType::q4_0);
    EXPECT_EQ(sgtest::read_bytes(dir.file("again.gguf")), sgtest::read_bytes(path));
    EXPECT_EQ(loaded.weights().layers[0].wq.dtype(), sg::DType::u8);
    EXPECT_EQ(loaded.weights().tok_embeddings.dtype(), sg::DType::u8);
    EXPECT_EQ(loaded.weights().norm.dtype(), sg::DType::f32);
    // A quarter (Q8_0: 34 of 128 bytes) or less of the f32 weights; the
    // norms stay f32.
    EXPECT_LT(loaded.weight_bytes() * (q8 ? 3 : 6), m.weight_bytes());
    // The logits are those of the decoded weights, up to the activations'
    // 8-bit blocks (Note [Activations quantized per block]): 1.1% (Q8_0) and
    // 0.9% (Q4_0) of the largest logit here, through two layers.
    const std::vector<float> got = logits(loaded);
    const std::vector<float> want = logits(sg::models::dequantize_model(loaded));
    float scale = 0;
    for (const float v : want) scale = std::max(scale, std::fabs(v));
    expect_close(got, want, 3e-2F * std::max(1.0F, scale));
    // Every mode computes the same ids from the blocks.
    const auto eager = ids(loaded, sg::Mode::eager);
    EXPECT_EQ(ids(loaded, sg::Mode::reduce_overhead), eager);
    EXPECT_EQ(ids(loaded, sg::Mode::max_autotune), eager);
    // Writing it in a format without quantized types writes the decoded values.
    sg::models::save_model(loaded, dir.file("back.bin"), sg::models::CheckpointFormat::llama2c);
    EXPECT_EQ(logits(sg::models::load_model(dir.file("back.bin"))),
              logits(sg::models::dequantize_model(loaded)));
    expect_error(
        [&] {
          (void)sg::models::shard_model(loaded, {0, 0, 2});
        },
        {"shard_model", "quantized"});
  }
}

TEST(models_gguf, stories260k_as_gguf_is_the_same_model) {
  const sgtest::TempDir dir("sg_gguf");
  const std::string bin = std::string(SG_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  const LlamaModel m = sg::models::load_model(bin);
  sg::models::save_gguf(m, dir.file("s.gguf"));
  const LlamaModel g = sg::models::load_model(dir.file("s.gguf"));
  EXPECT_EQ(g.config().str(), m.config().str());
  EXPECT_EQ(logits(g), logits(m));
}

// ---- hostile files, built byte by byte ----

// An independent little GGUF writer: values are appended exactly as the
// format lays them out, so a test can put any byte anywhere.
class Builder {
 public:
  std::uint32_t version = 3;
  std::optional<std::uint64_t> tensor_count;  // override the real counts
  std::optional<std::uint64_t> kv_count;

  template <typename T>
  static void put(Bytes& out, T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void put_string(Bytes& out, const std::string& s) {
    put<std::uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  // A key with a value already encoded (its type first).
  void raw(const std::string& key, const Bytes& typed_value) {
    put_string(kv_, key);
    kv_.insert(kv_.end(), typed_value.begin(), typed_value.end());
    ++kvs_;
  }
  void u32(const std::string& key, std::uint32_t v) {
    Bytes b;
    put<std::uint32_t>(b, 4);
    put(b, v);
    raw(key, b);
  }
  void f32(const std::string& key, float v) {
    Bytes b;
    put<std::uint32_t>(b, 6);
    put(b, v);
    raw(key, b);
  }
  void str(const std::string& key, const std::string& v) {
    Bytes b;
    put<std::uint32_t>(b, 8);
    put_string(b, v);
    raw(key, b);
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    put<std::uint32_t>(b, 9);
    put<std::uint32_t>(b, 8);
    put<std::uint64_t>(b, v.size());
    for (const auto& s : v) put_string(b, s);
    raw(key, b);
  }
  // A tensor of f32 values (or raw bytes of `type`), placed after the
  // previous one unless `offset` says where.
  void tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type,
              Bytes data, std::optional<std::uint64_t> offset = std::nullopt) {
    tensors_.push_back({name, std::move(ne), type, std::move(data), offset});
  }
  void f32_tensor(const std::string& name, std::vector<std::uint64_t> ne, float scale = 0.1F) {
    std::uint64_t n = 1;
    for (const auto d : ne) n *= d;
    Bytes data;
    for (std::uint64_t i = 0; i < n; ++i) {
      seed_ = seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
      put<float>(data, scale * (static_cast<float>(seed_ >> 40) / 16777216.0F - 0.5F));
    }
    tensor(name, std::move(ne), 0, std::move(data));
  }

  [[nodiscard]] Bytes build() const {
    Bytes out;
    put<std::uint32_t>(out, 0x46554747);
    put(out, version);
    put<std::uint64_t>(out, tensor_count.value_or(tensors_.size()));
    put<std::uint64_t>(out, kv_count.value_or(kvs_));
    out.insert(out.end(), kv_.begin(), kv_.end());
    std::vector<std::uint64_t> offsets;
    std::uint64_t next = 0;
    for (const auto& t : tensors_) {
      const std::uint64_t at = t.offset.value_or(next);
      offsets.push_back(at);
      next = (std::max(next, at + t.data.size()) + 31) / 32 * 32;
      put_string(out, t.name);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(t.ne.size()));
      for (const auto d : t.ne) put(out, d);
      put(out, t.type);
      put(out, at);
    }
    out.resize((out.size() + 31) / 32 * 32, 0);
    const std::size_t data_start = out.size();
    out.resize(data_start + next, 0);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& d = tensors_[i].data;
      const std::size_t at = data_start + offsets[i];
      if (at + d.size() > out.size()) out.resize(at + d.size(), 0);
      std::memcpy(out.data() + at, d.data(), d.size());
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<std::uint64_t> ne;
    std::uint32_t type;
    Bytes data;
    std::optional<std::uint64_t> offset;
  };
  Bytes kv_;
  std::uint64_t kvs_ = 0;
  std::vector<T> tensors_;
  std::uint64_t seed_ = 1;
};

// A valid one-layer llama file (dim 32, hidden 64, 4 heads, 2 kv heads,
// vocab 32), with `skip` left out and `edit` applied before its tensors.
struct Llama {
  std::string skip_key;
  std::string skip_tensor;
};
Builder valid_llama(
    const Llama& o = {}, const std::function<void(Builder&)>& edit = [](Builder&) {}) {
  Builder b;
  const auto u32 = [&](const std::string& k, std::uint32_t v) {
    if (k != o.skip_key) b.u32(k, v);
  };
  if (o.skip_key != "general.architecture") b.str("general.architecture", "llama");
  u32("llama.context_length", 16);
  u32("llama.embedding_length", 32);
  u32("llama.block_count", 1);
  u32("llama.feed_forward_length", 64);
  u32("llama.attention.head_count", 4);
  u32("llama.attention.head_count_kv", 2);
  if (o.skip_key != "llama.attention.layer_norm_rms_epsilon")
    b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5F);
  edit(b);
  const std::vector<std::pair<std::string, std::vector<std::uint64_t>>> tensors = {
      {"token_embd.weight", {32, 32}},        {"output_norm.weight", {32}},
      {"blk.0.attn_norm.weight", {32}},       {"blk.0.attn_q.weight", {32, 32}},
      {"blk.0.attn_k.weight", {32, 16}},      {"blk.0.attn_v.weight", {32, 16}},
      {"blk.0.attn_output.weight", {32, 32}}, {"blk.0.ffn_norm.weight", {32}},
      {"blk.0.ffn_gate.weight", {32, 64}},    {"blk.0.ffn_down.weight", {64, 32}},
      {"blk.0.ffn_up.weight", {32, 64}}};
  for (const auto& [name, ne] : tensors) {
    if (name != o.skip_tensor) b.f32_tensor(name, ne);
  }
  return b;
}

void expect_refused(const Bytes& bytes, const std::vector<std::string>& parts) {
  expect_error([&] { (void)sg::models::parse_gguf(bytes, "h.gguf"); }, parts);
}

TEST(models_gguf, the_hand_built_file_loads) {
  const LlamaModel m = sg::models::parse_gguf(valid_llama().build(), "h.gguf");
  EXPECT_EQ(m.config().dim, 32);
  EXPECT_EQ(m.config().vocab_size, 32);
  EXPECT_TRUE(m.config().shared_classifier);
  EXPECT_EQ(m.config().rope_style, sg::ops::RopeStyle::interleaved);
}

TEST(models_gguf, a_file_cut_anywhere_is_an_error_naming_it) {
  const Bytes full = valid_llama().build();
  for (std::size_t n = 0; n < full.size(); n += (n < 2048 ? 1 : 97)) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      (void)sg::models::parse_gguf(cut, "h.gguf");
      ADD_FAILURE() << "a file cut to " << n << " of " << full.size() << " bytes loaded";
    } catch (const sg::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("h.gguf", 0), 0U) << e.what();
    }
  }
}

TEST(models_gguf, bad_headers_are_refused) {
  Bytes bytes = valid_llama().build();
  bytes[0] = 'X';
  expect_refused(bytes, {"h.gguf", "not a GGUF file"});
  for (const std::uint32_t version : {1U, 4U}) {
    Builder b = valid_llama();
    b.version = version;
    expect_refused(b.build(), {"GGUF version " + std::to_string(version)});
  }
  Builder be = valid_llama();
  be.version = 0x03000000;
  expect_refused(be.build(), {"big-endian"});
  Builder many = valid_llama();
  many.tensor_count = std::uint64_t{1} << 62;
  expect_refused(many.build(), {"claims", "tensors"});
  Builder kvs = valid_llama();
  kvs.kv_count = std::numeric_limits<std::uint64_t>::max();
  expect_refused(kvs.build(), {"claims", "metadata entries"});
}

// A metadata value given as raw bytes (its type first).
Bytes typed(std::uint32_t type, const Bytes& payload) {
  Bytes b;
  Builder::put(b, type);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}
Bytes u64_bytes(std::uint64_t v) {
  Bytes b;
  Builder::put(b, v);
  return b;
}

TEST(models_gguf, bad_metadata_is_refused) {
  const auto with = [](const std::function<void(Builder&)>& edit) {
    return valid_llama({}, edit).build();
  };
  expect_refused(with([](Builder& b) { b.raw("x.huge", typed(8, u64_bytes(1ULL << 60))); }),
                 {"metadata x.huge", "truncated"});
  expect_refused(with([](Builder& b) {
                   Bytes v;
                   Builder::put<std::uint32_t>(v, 6);  // f32 elements
                   Builder::put<std::uint64_t>(v, 1ULL << 61);
                   b.raw("x.array", typed(9, v));
                 }),
                 {"metadata x.array", "cannot fit"});
  expect_refused(with([](Builder& b) { b.raw("x.type", typed(13, {})); }),
                 {"metadata x.type", "unknown value type 13"});
  expect_refused(with([](Builder& b) { b.raw("x.bool", typed(7, {2})); }),
                 {"metadata x.bool", "0 or 1"});
  expect_refused(with([](Builder& b) { b.u32("llama.block_count", 1); }),
                 {"metadata llama.block_count appears twice"});
  expect_refused(with([](Builder& b) { b.raw("", typed(4, {0, 0, 0, 0})); }), {"empty key"});
  expect_refused(with([](Builder& b) {
                   // An array of arrays of ... (6 levels), the innermost of no u32.
                   Bytes payload;
                   Builder::put<std::uint32_t>(payload, 4);
                   Builder::put<std::uint64_t>(payload, 0);
                   for (int level = 1; level < 6; ++level) {
                     Bytes outer;
                     Builder::put<std::uint32_t>(outer, 9);
                     Builder::put<std::uint64_t>(outer, 1);
                     outer.insert(outer.end(), payload.begin(), payload.end());
                     payload = std::move(outer);
                   }
                   b.raw("x.deep", typed(9, payload));
                 }),
                 {"metadata x.deep", "nested more than"});
  for (const std::uint32_t alignment : {0U, 24U}) {
    expect_refused(with([&](Builder& b) { b.u32("general.alignment", alignment); }),
                   {"general.alignment", "power of two"});
  }
  expect_refused(with([](Builder& b) { b.str("general.alignment", "32"); }),
                 {"general.alignment must be a u32"});
}

TEST(models_gguf, ignored_metadata_of_every_type_is_read) {
  const Bytes bytes =
      valid_llama({}, [](Builder& b) {
        for (std::uint32_t t = 0; t <= 12; ++t) {
          if (t == 8 || t == 9) continue;
          const std::size_t size = t <= 1 || t == 7 ? 1 : t <= 3 ? 2 : t <= 6 ? 4 : 8;
          b.raw("x.scalar" + std::to_string(t), typed(t, Bytes(size, 1)));
          Bytes arr;
          Builder::put(arr, t);
          Builder::put<std::uint64_t>(arr, 3);
          arr.resize(arr.size() + 3 * size, 1);
          b.raw("x.array" + std::to_string(t), typed(9, arr));
        }
        b.strings("x.strings", {"a", "", "c"});
      }).build();
  EXPECT_EQ(sg::models::parse_gguf(bytes, "h.gguf").config().dim, 32);
}

TEST(models_gguf, bad_tensor_infos_are_refused) {
  const auto with = [](const std::function<void(Builder&)>& edit) {
    Builder b = valid_llama();
    edit(b);
    return b.build();
  };
  expect_refused(with([](Builder& b) {
                   b.tensor("x", {32, 32}, 12, Bytes(32 * 32 / 256 * 144));
                 }),
                 {"tensor x", "q4_k", "does not read"});
  expect_refused(with([](Builder& b) { b.tensor("x", {32}, 99, Bytes(32)); }), {"number 99"});
  expect_refused(with([](Builder& b) { b.tensor("x", {48}, 8, Bytes(34)); }),
                 {"tensor x", "q8_0", "not whole blocks of 32"});
  expect_refused(with([](Builder& b) { b.tensor("x", {}, 0, {}); }), {"tensor x has 0 dimensions"});
  expect_refused(with([](Builder& b) {
                   b.tensor("x", {1, 1, 1, 1, 1}, 0, Bytes(4));
                 }),
                 {"tensor x has 5 dimensions"});
  expect_refused(with([](Builder& b) { b.tensor("x", {4, 0}, 0, {}); }), {"dimension 1 of size 0"});
  expect_refused(with([](Builder& b) { b.tensor("x", {4}, 0, Bytes(16), 8); }),
                 {"tensor x starts at offset 8", "alignment"});
  expect_refused(with([](Builder& b) { b.tensor("x", {4}, 0, Bytes(16), 0); }), {"overlap"});
  expect_refused(with([](Builder& b) { b.tensor("x", {1ULL << 40}, 0, {}, 1ULL << 20); }),
                 {"truncated: tensor x needs"});
  expect_refused(with([](Builder& b) { b.tensor("output_norm.weight", {32}, 0, Bytes(128)); }),
                 {"tensor output_norm.weight appears twice"});
  expect_refused(with([](Builder& b) { b.tensor(std::string(64, 'n'), {4}, 0, Bytes(16)); }),
                 {"64 bytes long", "at most 63"});
}

TEST(models_gguf, files_that_are_no_model_of_ours_are_refused) {
  expect_refused(valid_llama({"general.architecture", ""}).build(),
                 {"general.architecture is missing"});
  expect_refused(valid_llama({"llama.block_count", ""}).build(),
                 {"metadata llama.block_count is missing"});
  expect_refused(valid_llama({"llama.attention.layer_norm_rms_epsilon", ""}).build(),
                 {"layer_norm_rms_epsilon is missing"});
  expect_refused(valid_llama({"", "blk.0.ffn_up.weight"}).build(),
                 {"missing tensor blk.0.ffn_up.weight"});
  const auto with = [](const std::function<void(Builder&)>& edit) {
    return valid_llama({}, edit).build();
  };
  Builder gpt = valid_llama({"general.architecture", ""});
  gpt.str("general.architecture", "gpt2");
  expect_refused(gpt.build(), {"architecture \"gpt2\" is not supported"});
  expect_refused(with([](Builder& b) { b.u32("llama.rope.dimension_count", 4); }),
                 {"rope.dimension_count is 4", "partial rotary"});
  expect_refused(with([](Builder& b) { b.str("llama.rope.scaling.type", "linear"); }),
                 {"rotary scaling is not implemented"});
  expect_refused(with([](Builder& b) { b.u32("llama.expert_count", 8); }), {"mixture-of-experts"});
  expect_refused(with([](Builder& b) { b.f32("llama.logit_scale", 2); }),
                 {"llama.logit_scale", "not implemented"});
  expect_refused(with([](Builder& b) { b.u32("llama.vocab_size", 33); }),
                 {"vocab_size is 33", "32 rows"});
  expect_refused(with([](Builder& b) {
                   b.strings("tokenizer.ggml.tokens", {"a", "b"});
                 }),
                 {"lists 2 tokens", "32 rows"});
  Builder wrong_type = valid_llama({"llama.context_length", ""});
  wrong_type.str("llama.context_length", "16");
  expect_refused(wrong_type.build(), {"metadata llama.context_length must be an integer"});
  Builder extra = valid_llama();
  extra.f32_tensor("blk.0.attn_q.bias", {32});
  expect_refused(extra.build(), {"tensor blk.0.attn_q.bias is not a weight of this model"});
  Builder rope = valid_llama();
  rope.f32_tensor("rope_freqs.weight", {4});
  expect_refused(rope.build(), {"rope_freqs.weight", "not implemented"});
  Builder shape = valid_llama({"", "blk.0.attn_k.weight"});
  shape.f32_tensor("blk.0.attn_k.weight", {16, 32});
  expect_refused(shape.build(), {"tensor blk.0.attn_k.weight has shape [32,16]", "needs [16,32]"});
}

TEST(models_gguf, non_finite_weights_are_refused_in_every_type) {
  Builder nan = valid_llama({"", "blk.0.ffn_norm.weight"});
  Bytes values(32 * 4, 0);
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(values.data() + 5 * 4, &bad, 4);
  nan.tensor("blk.0.ffn_norm.weight", {32}, 0, values);
  expect_refused(nan.build(), {"tensor blk.0.ffn_norm.weight", "index 5"});
  // A Q8_0 block whose f16 scale is infinity.
  Builder inf = valid_llama({"", "blk.0.attn_q.weight"});
  Bytes blocks(32 * 34, 0);
  const std::uint16_t inf_scale = 0x7C00;
  std::memcpy(blocks.data() + 3 * 34, &inf_scale, 2);
  inf.tensor("blk.0.attn_q.weight", {32, 32}, 8, blocks);
  expect_refused(inf.build(), {"tensor blk.0.attn_q.weight", "block 3", "finite"});
}

}  // namespace
