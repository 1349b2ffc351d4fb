// Checkpoint readers and writers (docs/model.md): the real stories260K file,
// round trips in both formats and every dtype, and corrupt inputs, each of
// which must be a sinkgraph::Error naming the file and the tensor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <stdlib.h>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"
#include "test_files.h"

namespace sinkgraph::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sgtest::Bytes;
using sgtest::read_bytes;
using sgtest::write_bytes;
using sgtest::write_text;

float raw_f32(const Bytes& bytes, std::size_t offset) {
  float v = 0;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

using sgtest::expect_error;

// A fresh folder per test.
class TempDir : public sgtest::TempDir {
 public:
  TempDir() : sgtest::TempDir("sg_checkpoint") {}
};

LlamaConfig small_config(ops::RopeStyle style = ops::RopeStyle::interleaved, bool shared = true) {
  LlamaConfig c;
  c.dim = 16;
  c.hidden_dim = 24;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 32;
  c.max_seq_len = 8;
  c.rope_style = style;
  c.shared_classifier = shared;
  return c;
}

// Every weight tensor of a model, named, in a fixed order.
std::vector<std::pair<std::string, Tensor>> all_tensors(const LlamaModel& m) {
  const LlamaWeights& w = m.weights();
  std::vector<std::pair<std::string, Tensor>> out{{"tok_embeddings", w.tok_embeddings}};
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const LlamaLayer& x = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const auto& [n, t] : {std::pair{"attention_norm", x.attention_norm},
                               {"wq", x.wq},
                               {"wk", x.wk},
                               {"wv", x.wv},
                               {"wo", x.wo},
                               {"ffn_norm", x.ffn_norm},
                               {"w1", x.w1},
                               {"w2", x.w2},
                               {"w3", x.w3}}) {
      out.emplace_back(p + n, t);
    }
  }
  out.emplace_back("norm", w.norm);
  out.emplace_back("output", w.output);
  return out;
}

float round_to(DType dtype, float v) {
  if (dtype == DType::f16) return f16_to_f32(f32_to_f16(v));
  if (dtype == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

// Bitwise equality of every weight, `a` rounded through `dtype` first.
void expect_same_weights(const LlamaModel& a, const LlamaModel& b, DType dtype = DType::f32) {
  const auto ta = all_tensors(a);
  const auto tb = all_tensors(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (std::size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(tb[i].second.dtype(), DType::f32) << ta[i].first;
    ASSERT_EQ(ta[i].second.shape(), tb[i].second.shape()) << ta[i].first;
    std::vector<float> va = ta[i].second.to_floats();
    const std::vector<float> vb = tb[i].second.to_floats();
    for (float& v : va) v = round_to(dtype, v);
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << ta[i].first;
  }
}

void expect_same_config(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_style, b.rope_style);
  EXPECT_EQ(a.shared_classifier, b.shared_classifier);
}

// ---- stories260K ----

const std::string kStories = std::string(SG_SHARED_DIR) + "/models/stories260K/stories260K.bin";

TEST(models_checkpoint, Stories260KLoadsWithTheReadmeConfig) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " is absent (../shared not laid out)";
  const LlamaModel m = load_model(kStories);
  const LlamaConfig& c = m.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.rope_style, ops::RopeStyle::interleaved);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_TRUE(m.weights().output.shares_storage(m.weights().tok_embeddings));

  // Spot checks against the raw bytes, offsets computed from the README layout.
  const Bytes raw = read_bytes(kStories);
  ASSERT_EQ(raw.size(), 1056540U);
  const std::size_t dim = 64, hidden = 172, kv = 32, vocab = 512, layers = 5;
  std::size_t at = 28;
  const std::size_t embed = at;
  at += vocab * dim * 4;
  const std::size_t rms_att = at;
  at += layers * dim * 4;
  const std::size_t wq = at;
  at += layers * dim * dim * 4;
  const std::size_t wk = at;
  at +=
      layers * kv * dim * 4 * 2 + layers * dim * dim * 4 + layers * dim * 4;  // wk, wv, wo, rms_ffn
  at += layers * hidden * dim * 4;                                            // w1
  const std::size_t w2 = at;
  at += layers * dim * hidden * 4 * 2;  // w2, w3
  const std::size_t rms_final = at;
  const LlamaWeights& w = m.weights();
  const auto at2 = [](const Tensor& t, std::size_t r, std::size_t col) {
    return t.to_floats()[r * static_cast<std::size_t>(t.shape()[1]) + col];
  };
  EXPECT_EQ(at2(w.tok_embeddings, 3, 5), raw_f32(raw, embed + (3 * dim + 5) * 4));
  EXPECT_EQ(at2(w.tok_embeddings, 511, 63), raw_f32(raw, embed + (511 * dim + 63) * 4));
  EXPECT_EQ(w.layers[4].attention_norm.to_floats()[7], raw_f32(raw, rms_att + (4 * dim + 7) * 4));
  EXPECT_EQ(at2(w.layers[2].wq, 7, 9), raw_f32(raw, wq + ((2 * dim + 7) * dim + 9) * 4));
  EXPECT_EQ(at2(w.layers[1].wk, 31, 0), raw_f32(raw, wk + ((1 * kv + 31) * dim + 0) * 4));
  EXPECT_EQ(at2(w.layers[3].w2, 10, 171), raw_f32(raw, w2 + ((3 * dim + 10) * hidden + 171) * 4));
  EXPECT_EQ(w.norm.to_floats()[63], raw_f32(raw, rms_final + 63 * 4));
  EXPECT_NE(w.norm.to_floats()[63], 0.0F);
}

TEST(models_checkpoint, Stories260KSavesBackByteForByteExceptFreqCis) {
  if (!fs::exists(kStories)) GTEST_SKIP() << kStories << " is absent (../shared not laid out)";
  const TempDir dir;
  const LlamaModel m = load_llama2c(kStories);
  save_model(m, dir.file("copy.bin"), CheckpointFormat::llama2c);
  const Bytes a = read_bytes(kStories);
  const Bytes b = read_bytes(dir.file("copy.bin"));
  ASSERT_EQ(a.size(), b.size());
  const std::size_t freq = 2 * 512 * 4 * 4;  // two [seq_len, head_size/2] tables at the end
  EXPECT_TRUE(std::equal(a.begin(), a.end() - static_cast<std::ptrdiff_t>(freq), b.begin()));
  EXPECT_TRUE(std::all_of(b.end() - static_cast<std::ptrdiff_t>(freq), b.end(),
                          [](std::uint8_t x) { return x == 0; }));
}

// ---- round trips ----

TEST(models_checkpoint, Llama2cRoundTripIsBitwise) {
  for (const bool shared : {true, false}) {
    const TempDir dir;
    const LlamaModel m = random_model(small_config(ops::RopeStyle::interleaved, shared), 7);
    const std::string path = dir.file("m.bin");
    save_model(m, path, CheckpointFormat::llama2c);
    const LlamaModel back = load_model(path);
    expect_same_config(m.config(), back.config());
    expect_same_weights(m, back);
    EXPECT_EQ(back.weights().output.shares_storage(back.weights().tok_embeddings), shared);
    // The header's vocab_size is negative exactly when the classifier is separate.
    const Bytes raw = read_bytes(path);
    std::int32_t vocab = 0;
    std::memcpy(&vocab, raw.data() + 20, 4);
    EXPECT_EQ(vocab, shared ? 32 : -32);
  }
}

TEST(models_checkpoint, Llama2cWriterRejectsWhatTheFormatCannotHold) {
  const TempDir dir;
  const std::string path = dir.file("m.bin");
  const LlamaModel m = random_model(small_config(), 1);
  expect_error([&] { save_model(m, path, CheckpointFormat::llama2c, DType::f16); }, {path, "f32"});
  const LlamaModel half = random_model(small_config(ops::RopeStyle::half), 1);
  expect_error([&] { save_model(half, path, CheckpointFormat::llama2c); }, {path, "interleaved"});
  EXPECT_FALSE(fs::exists(path));
}

TEST(models_checkpoint, SafetensorsRoundTripsEveryDtypeAndRopeStyle) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
      for (const bool shared : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (shared ? " shared" : " separate") +
                     (style == ops::RopeStyle::half ? " half" : " interleaved"));
        LlamaConfig c = small_config(style, shared);
        c.norm_eps = 1e-6;
        c.rope_theta = 500000.0;
        const LlamaModel m = random_model(c, 3);
        const TempDir dir;
        const std::string path = dir.file("model.safetensors");
        save_model(m, path, CheckpointFormat::safetensors, dtype);
        ASSERT_TRUE(fs::exists(dir.file("config.json")));
        for (const std::string& where : {path, dir.path()}) {
          const LlamaModel back = load_model(where);
          expect_same_config(m.config(), back.config());
          expect_same_weights(m, back, dtype);
        }
        // The header is 8-byte aligned and names the dtype.
        const Bytes raw = read_bytes(path);
        std::uint64_t n = 0;
        std::memcpy(&n, raw.data(), 8);
        EXPECT_EQ(n % 8, 0U);
        const json header =
            json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n));
        EXPECT_EQ(header.at("layers.1.attention.wk.weight").at("dtype"), dtype == DType::f32 ? "F32"
                                                                         : dtype == DType::f16
                                                                             ? "F16"
                                                                             : "BF16");
        EXPECT_EQ(header.contains("output.weight"), !shared);
      }
    }
  }
}

TEST(models_checkpoint, SafetensorsSavesIntoAFolder) {
  const TempDir dir;
  const LlamaModel m = random_model(small_config(), 5);
  save_model(m, dir.path(), CheckpointFormat::safetensors);
  EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
  expect_same_weights(m, load_model(dir.path()));
  expect_error(
      [&] { save_model(m, dir.file("x.safetensors"), CheckpointFormat::safetensors, DType::i32); },
      {"x.safetensors", "i32"});
}

// ---- tensor-parallel shards ----

// Every reader, given a rank of a tensor-parallel split, returns exactly what
// shard_model cuts from the whole model (rows and column slices of every
// format and dtype), and holds only that: weight_bytes is the shard's.
TEST(models_checkpoint, EveryReaderLoadsOnlyItsShard) {
  const TempDir dir;
  const LlamaModel interleaved = random_model(small_config(), 11);
  const LlamaModel separate = random_model(small_config(ops::RopeStyle::half, false), 12);
  save_model(interleaved, dir.file("m.bin"), CheckpointFormat::llama2c);
  fs::create_directory(dir.file("st"));
  save_model(separate, dir.file("st/model.safetensors"), CheckpointFormat::safetensors,
             DType::bf16);
  save_hf(interleaved, dir.file("hf"), DType::f16, 3);
  for (const std::string& path :
       {dir.file("m.bin"), dir.file("st/model.safetensors"), dir.file("hf")}) {
    SCOPED_TRACE(path);
    const LlamaModel whole = load_model(path);
    for (std::int64_t rank = 0; rank < 2; ++rank) {
      const TensorParallel tp{0, rank, 2};
      const LlamaModel loaded = load_model(path, tp);
      const LlamaModel cut = shard_model(whole, tp);
      EXPECT_EQ(loaded.tensor_parallel().rank, rank);
      EXPECT_EQ(loaded.tensor_parallel().size, 2);
      expect_same_config(cut.config(), loaded.config());
      expect_same_weights(cut, loaded);
      EXPECT_EQ(loaded.weight_bytes(), cut.weight_bytes());
      EXPECT_LT(loaded.weight_bytes(), whole.weight_bytes());
    }
    // A split that breaks heads (4 heads, 2 kv heads) fails before decoding.
    expect_error(
        [&] {
          (void)load_model(path, TensorParallel{0, 0, 4});
        },
        {"tensor parallelism over 4 processes", "whole heads"});
  }
}

// ---- corrupt llama2.c files ----

// A llama2.c file for a header, with the exact size the header implies (+ extra).
Bytes llama2c_file(const std::vector<std::int32_t>& h, std::int64_t extra = 0) {
  const std::int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4];
  const std::int64_t vocab = std::abs(static_cast<std::int64_t>(h[5])), seq = h[6];
  const std::int64_t kv = dim * kv_heads / heads;
  std::int64_t floats = vocab * dim +
                        layers * (2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * hidden * dim) + dim +
                        2 * seq * (dim / heads / 2) + (h[5] < 0 ? vocab * dim : 0);
  Bytes out(static_cast<std::size_t>(28 + 4 * floats + extra), 0);
  std::memcpy(out.data(), h.data(), 28);
  return out;
}

const std::vector<std::int32_t> kHeader = {16, 24, 2, 4, 2, 32, 8};

TEST(models_checkpoint, Llama2cHandBuiltFileParses) {
  const LlamaModel m = parse_llama2c(llama2c_file(kHeader), "ok.bin");
  EXPECT_EQ(m.config().kv_dim(), 8);
  const std::vector<std::int32_t> separate = {16, 24, 2, 4, 2, -32, 8};
  EXPECT_FALSE(parse_llama2c(llama2c_file(separate), "ok.bin").config().shared_classifier);
}

TEST(models_checkpoint, Llama2cTruncatedNamesTheFirstTensorThatDoesNotFit) {
  const Bytes full = llama2c_file(kHeader);
  const auto cut = [&](std::size_t n) {
    return Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
  };
  expect_error(
      [&] { parse_llama2c(cut(100), "t.bin"); },
      {"t.bin", "tensor token_embedding", "needs 2048 bytes at offset 28", "has 100 bytes"});
  // token_embedding 2048 + 2 rms_att 128 + layers.0.wq 1024: layers.1.wq starts at
  // 28+2048+128+1024.
  expect_error([&] { parse_llama2c(cut(28 + 2048 + 128 + 1024 + 10), "t.bin"); },
               {"t.bin", "tensor layers.1.wq"});
  expect_error([&] { parse_llama2c(cut(full.size() - 1), "t.bin"); }, {"t.bin", "freq_cis_imag"});
  expect_error([&] { parse_llama2c(cut(27), "t.bin"); }, {"t.bin", "header"});
  expect_error([&] { parse_llama2c(Bytes{}, "t.bin"); }, {"t.bin", "header"});
  // From disk, the message names the path.
  const TempDir dir;
  const std::string path = dir.file("short.bin");
  write_bytes(path, cut(5000));
  expect_error([&] { load_model(path); }, {path, "tensor layers."});
}

// The freq_cis tables are read by nothing, but a NaN or infinity in them is
// refused like one in a weight: the file is damaged (issue: "the weights
// check covers every tensor, used or not").
TEST(models_checkpoint, Llama2cNonFiniteValuesInTheUnusedFreqCisTablesAreErrors) {
  Bytes file = llama2c_file(kHeader);
  EXPECT_NO_THROW((void)parse_llama2c(file, "ok.bin"));
  const auto put = [&](std::size_t at, float v) { std::memcpy(file.data() + at, &v, 4); };
  put(file.size() - 4, NAN);  // the last value of freq_cis_imag ([8, 2])
  expect_error(
      [&] { parse_llama2c(file, "t.bin"); },
      {"t.bin", "tensor freq_cis_imag", "not finite (nan) at index 15 of 16", "does not use"});
  put(file.size() - 4, 0.0F);
  put(file.size() - 64 - 8, -INFINITY);  // freq_cis_real, index 14
  expect_error([&] { parse_llama2c(file, "t.bin"); },
               {"t.bin", "tensor freq_cis_real", "(-inf) at index 14"});
}

TEST(models_checkpoint, Llama2cTrailingBytesAreAnError) {
  expect_error([&] { parse_llama2c(llama2c_file(kHeader, 4), "t.bin"); },
               {"t.bin", "4 trailing bytes"});
  const std::vector<std::int32_t> separate = {16, 24, 2, 4, 2, -32, 8};
  // A shared-classifier header with a classifier appended: trailing bytes.
  expect_error([&] { parse_llama2c(llama2c_file(kHeader, 32 * 16 * 4), "t.bin"); },
               {"t.bin", "2048 trailing bytes"});
  // A separate-classifier header without one: wcls does not fit.
  const Bytes full = llama2c_file(separate);
  ASSERT_GT(full.size(), 32U * 16 * 4);
  const Bytes missing(full.begin(), full.end() - 32 * 16 * 4);
  expect_error([&] { parse_llama2c(missing, "t.bin"); }, {"t.bin", "tensor wcls"});
}

TEST(models_checkpoint, Llama2cAbsurdHeadersAreErrors) {
  struct Case {
    std::vector<std::int32_t> header;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{-16, 24, 2, 4, 2, 32, 8}, "dim"},
      {{0, 24, 2, 4, 2, 32, 8}, "dim"},
      {{1000000000, 24, 2, 4, 2, 32, 8}, "dim"},
      {{16, 0, 2, 4, 2, 32, 8}, "hidden_dim"},
      {{16, 24, -1, 4, 2, 32, 8}, "n_layers"},
      {{16, 24, 2000000000, 4, 2, 32, 8}, "n_layers"},
      {{16, 24, 2, 3, 1, 32, 8}, "n_heads"},     // 3 does not divide 16
      {{16, 24, 2, 4, 3, 32, 8}, "n_kv_heads"},  // 3 does not divide 4
      {{16, 24, 2, 4, 0, 32, 8}, "n_kv_heads"},
      {{16, 24, 2, 4, 2, 0, 8}, "vocab_size"},
      {{16, 24, 2, 4, 2, INT32_MIN, 8}, "vocab_size"},
      {{16, 24, 2, 4, 2, 32, -8}, "max_seq_len"},
      {{16, 24, 2, 16, 2, 32, 8}, "head size"},  // head size 1 is odd
  };
  for (const Case& c : cases) {
    Bytes bytes(28 + 4096, 0);
    std::memcpy(bytes.data(), c.header.data(), 28);
    expect_error([&] { parse_llama2c(bytes, "absurd.bin"); }, {"absurd.bin", c.mention});
  }
}

TEST(models_checkpoint, MissingFilesAreErrors) {
  const TempDir dir;
  expect_error([&] { load_model(dir.file("nope.bin")); }, {dir.file("nope.bin")});
  expect_error([&] { load_model(dir.file("nope.safetensors")); },
               {"nope.safetensors", "config.json"});
  expect_error([&] { load_model(dir.path()); }, {dir.path(), "model.safetensors"});
  save_model(random_model(small_config(), 2), dir.file("model.safetensors"),
             CheckpointFormat::safetensors);
  fs::remove(dir.file("config.json"));
  expect_error([&] { load_model(dir.file("model.safetensors")); },
               {"model.safetensors", "config.json"});
  expect_error([&] { load_model(dir.path()); }, {"config.json"});
}

// ---- corrupt safetensors files ----

// A valid small checkpoint, split into its JSON header and data section.
struct Safetensors {
  json header;
  Bytes data;
  std::string config;

  static Safetensors make(bool shared = true) {
    const TempDir dir;
    save_model(random_model(small_config(ops::RopeStyle::interleaved, shared), 9), dir.path(),
               CheckpointFormat::safetensors);
    const Bytes raw = read_bytes(dir.file("model.safetensors"));
    std::uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    Safetensors s;
    s.header = json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    s.data.assign(raw.begin() + 8 + static_cast<std::ptrdiff_t>(n), raw.end());
    std::ifstream in(dir.file("config.json"));
    s.config.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return s;
  }
  [[nodiscard]] Bytes bytes() const { return assemble(header.dump(), data); }
  static Bytes assemble(const std::string& text, const Bytes& data, std::uint64_t n = UINT64_MAX) {
    if (n == UINT64_MAX) n = text.size();
    // Sized once and filled with memcpy (GCC 12 at -O3 misreports a growing insert).
    Bytes out(8 + text.size() + data.size());
    std::memcpy(out.data(), &n, 8);
    if (!text.empty()) std::memcpy(out.data() + 8, text.data(), text.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
    return out;
  }
};

TEST(models_checkpoint, SafetensorsBaselineParses) {
  const Safetensors s = Safetensors::make();
  const LlamaModel m = parse_safetensors(s.bytes(), s.config, "m.safetensors");
  EXPECT_EQ(m.config().dim, 16);
}

TEST(models_checkpoint, SafetensorsBadFramingIsAnError) {
  const Safetensors s = Safetensors::make();
  const auto parse = [&](const Bytes& b) {
    return [&, b] { parse_safetensors(b, s.config, "bad.safetensors"); };
  };
  expect_error(parse(Bytes{1, 2, 3}), {"bad.safetensors", "8 bytes"});
  expect_error(parse(Safetensors::assemble("{}", {}, 1000)),
               {"bad.safetensors", "header length 1000", "past the end"});
  expect_error(parse(Safetensors::assemble("{}", {}, 1ULL << 40)), {"bad.safetensors", "limit"});
  expect_error(parse(Safetensors::assemble("{\"a\": [1, 2", {})),
               {"bad.safetensors", "malformed JSON"});
  expect_error(parse(Safetensors::assemble("[1, 2]", {})), {"bad.safetensors", "object"});
  expect_error(parse(Safetensors::assemble("{}", {})),
               {"bad.safetensors", "missing tensor tok_embeddings"});
}

// The tensors must cover the data section exactly once (the safetensors
// format's rule): overlapping ranges and holes were accepted before.
TEST(models_checkpoint, SafetensorsTensorsMustCoverTheDataExactly) {
  const auto expect_bad = [](const std::function<void(Safetensors&)>& edit,
                             const std::vector<std::string>& parts) {
    Safetensors s = Safetensors::make();
    edit(s);
    expect_error([&] { parse_safetensors(s.bytes(), s.config, "cover.safetensors"); }, parts);
  };
  const std::string wq = "layers.1.attention.wq.weight";
  const std::string wk = "layers.1.attention.wk.weight";
  // wo (dim x dim, as wq) pointed at wq's bytes: two tensors on one range.
  const std::string wo = "layers.1.attention.wo.weight";
  expect_bad([&](Safetensors& s) { s.header[wo]["data_offsets"] = s.header[wq]["data_offsets"]; },
             {"cover.safetensors", "overlaps the tensor before it"});
  // A hole in the middle: wk moves to the end, its old bytes belong to no one.
  expect_bad(
      [&](Safetensors& s) {
        const auto begin = s.header[wk]["data_offsets"][0].get<std::uint64_t>();
        const auto end = s.header[wk]["data_offsets"][1].get<std::uint64_t>();
        const std::uint64_t at = s.data.size();
        s.data.insert(s.data.end(), s.data.begin() + static_cast<std::ptrdiff_t>(begin),
                      s.data.begin() + static_cast<std::ptrdiff_t>(end));
        s.header[wk]["data_offsets"] = {at, at + (end - begin)};
      },
      {"cover.safetensors", "belong to no tensor (a hole before tensor"});
  expect_bad([&](Safetensors& s) { s.data.resize(s.data.size() + 8); },
             {"at the end of the data section belong to no tensor"});
}

TEST(models_checkpoint, SafetensorsBadTensorEntriesAreErrors) {
  const auto expect_bad = [](const std::function<void(Safetensors&)>& edit,
                             const std::vector<std::string>& parts) {
    Safetensors s = Safetensors::make();
    edit(s);
    expect_error([&] { parse_safetensors(s.bytes(), s.config, "bad.safetensors"); }, parts);
  };
  const std::string wq = "layers.1.attention.wq.weight";
  // Offsets out of range, reversed, or disagreeing with shape and dtype.
  expect_bad([&](Safetensors& s) { s.header[wq]["data_offsets"][1] = s.data.size() + 4; },
             {"bad.safetensors", wq, "data_offsets"});
  expect_bad(
      [&](Safetensors& s) {
        s.header[wq]["data_offsets"] = {100, 50};
      },
      {wq, "data_offsets"});
  expect_bad(
      [&](Safetensors& s) {
        s.header[wq]["data_offsets"] = {-4, 50};
      },
      {wq, "non-negative"});
  expect_bad([&](Safetensors& s) { s.header[wq]["data_offsets"] = {0}; }, {wq, "[begin, end]"});
  expect_bad(
      [&](Safetensors& s) {
        s.header[wq]["data_offsets"][1] = s.header[wq]["data_offsets"][1].get<int>() - 4;
      },
      {wq, "needs 1024"});
  expect_bad(
      [&](Safetensors& s) {
        s.header["norm.weight"]["shape"] = {4, 4};
      },
      {"norm.weight", "shape [4,4]", "needs [16]"});
  expect_bad([&](Safetensors& s) { s.header[wq]["shape"] = {8, 32}; }, {wq, "shape [8,32]"});
  expect_bad([&](Safetensors& s) { s.header[wq]["shape"] = {16, "x"}; }, {wq, "shape"});
  expect_bad([&](Safetensors& s) { s.header[wq]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1024}; },
             {wq, "shape"});
  // Dtypes.
  expect_bad([&](Safetensors& s) { s.header[wq]["dtype"] = "F64"; }, {wq, "F64"});
  expect_bad([&](Safetensors& s) { s.header[wq]["dtype"] = "I8"; }, {wq, "I8"});
  expect_bad([&](Safetensors& s) { s.header[wq]["dtype"] = 3; }, {wq, "dtype"});
  expect_bad([&](Safetensors& s) { s.header[wq].erase("dtype"); }, {wq, "dtype"});
  // Missing, extra and misnamed tensors.
  expect_bad([&](Safetensors& s) { s.header.erase("layers.1.feed_forward.w2.weight"); },
             {"bad.safetensors", "missing tensor layers.1.feed_forward.w2.weight"});
  expect_bad([&](Safetensors& s) { s.header.erase("norm.weight"); },
             {"missing tensor norm.weight"});
  expect_bad([&](Safetensors& s) { s.header["layers.2.attention.wq.weight"] = s.header[wq]; },
             {"layers.2.attention.wq.weight", "not a Llama weight"});
  expect_bad([&](Safetensors& s) { s.header["layers.01.attention.wq.weight"] = s.header[wq]; },
             {"layers.01.attention.wq.weight"});
  expect_bad([&](Safetensors& s) { s.header["rope.freqs"] = s.header["norm.weight"]; },
             {"rope.freqs"});
  expect_bad([&](Safetensors& s) { s.header["__metadata__"] = 7; }, {"__metadata__"});
  expect_bad([&](Safetensors& s) { s.header[wq] = "x"; }, {wq, "object"});
}

TEST(models_checkpoint, SafetensorsHalfDtypesDecode) {
  // A hand-written f16/bf16 entry decodes with the RNE helpers.
  // norm.weight's f32 bytes end the data section; the half-precision bytes
  // replace them there (the tensors must cover the data section exactly).
  Safetensors s = Safetensors::make();
  const auto end = s.header["norm.weight"]["data_offsets"][0].get<std::uint64_t>();
  ASSERT_EQ(s.header["norm.weight"]["data_offsets"][1].get<std::uint64_t>(), s.data.size());
  s.data.resize(end);
  const std::vector<float> values = {1.0F, -2.5F, 0.1F, 65504.0F, 1e-7F, 3.14159F, -0.0F, 100.0F,
                                     7.0F, 8.0F,  9.0F, 10.0F,    11.0F, 12.0F,    13.0F, 14.0F};
  for (const auto& [tag, dtype] : {std::pair{"F16", DType::f16}, {"BF16", DType::bf16}}) {
    Safetensors t = s;
    for (const float v : values) {
      const std::uint16_t bits = dtype == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v);
      t.data.push_back(static_cast<std::uint8_t>(bits & 0xFF));
      t.data.push_back(static_cast<std::uint8_t>(bits >> 8));
    }
    t.header["norm.weight"] = {{"dtype", tag}, {"shape", {16}}, {"data_offsets", {end, end + 32}}};
    const LlamaModel m = parse_safetensors(t.bytes(), t.config, "half.safetensors");
    const std::vector<float> got = m.weights().norm.to_floats();
    for (std::size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(got[i], round_to(dtype, values[i])) << tag << i;
  }
}

TEST(models_checkpoint, SafetensorsBadConfigValuesAreErrors) {
  const Safetensors s = Safetensors::make();
  const Bytes bytes = s.bytes();
  const json good = json::parse(s.config);
  const auto expect_bad = [&](const std::function<void(json&)>& edit,
                              const std::vector<std::string>& parts) {
    json c = good;
    edit(c);
    expect_error([&] { parse_safetensors(bytes, c.dump(), "cfg.safetensors"); }, parts);
  };
  expect_bad([](json& c) { c["dim"] = "16"; }, {"cfg.safetensors", "\"dim\" must be an integer"});
  expect_bad([](json& c) { c["dim"] = 16.5; }, {"\"dim\" must be an integer"});
  expect_bad([](json& c) { c["dim"] = -16; }, {"dim"});
  expect_bad([](json& c) { c["dim"] = 0; }, {"dim"});
  expect_bad([](json& c) { c["dim"] = 1000000000; }, {"dim"});
  expect_bad([](json& c) { c["vocab_size"] = 18446744073709551615ULL; }, {"vocab_size"});
  expect_bad([](json& c) { c["n_heads"] = 3; }, {"n_heads"});
  expect_bad([](json& c) { c["n_kv_heads"] = 3; }, {"n_kv_heads"});
  expect_bad([](json& c) { c.erase("n_layers"); }, {"missing \"n_layers\""});
  expect_bad([](json& c) { c["rope_style"] = "sideways"; }, {"rope_style"});
  expect_bad([](json& c) { c["norm_eps"] = "small"; }, {"norm_eps"});
  expect_bad([](json& c) { c["rope_theta"] = -1.0; }, {"rope_theta"});
  // Values checked in the type the kernels use (f32): positive in double,
  // 0 or subnormal in f32, which made every logit NaN.
  expect_bad([](json& c) { c["rope_theta"] = 1e-46; }, {"rope_theta", "f32"});
  expect_bad([](json& c) { c["rope_theta"] = 1e-300; }, {"rope_theta", "f32"});
  expect_bad([](json& c) { c["rope_theta"] = 1e-39; }, {"rope_theta", "f32"});
  expect_bad([](json& c) { c["rope_theta"] = 1e39; }, {"rope_theta", "f32"});
  expect_bad([](json& c) { c["norm_eps"] = 1e-50; }, {"norm_eps", "rounds to 0"});
  expect_bad([](json& c) { c = json::array(); }, {"object"});
  // A Hugging Face config that lost its model_type is named as one, not
  // reported as missing our "dim".
  expect_bad(
      [](json& c) {
        c = json{{"hidden_size", 16}, {"num_hidden_layers", 2}};
      },
      {"cfg.safetensors", "missing \"model_type\"", "Hugging Face"});
  // A config that disagrees with the tensors: the first misshapen tensor is named.
  expect_bad([](json& c) { c["hidden_dim"] = 32; }, {"cfg.safetensors", "feed_forward.w", "needs"});
  expect_bad([](json& c) { c["n_layers"] = 3; }, {"missing tensor layers.2.attention_norm.weight"});
  expect_bad([](json& c) { c["n_layers"] = 1; }, {"layers.1.", "not a Llama weight"});
  expect_error([&] { parse_safetensors(bytes, "{\"dim\": ", "cfg.safetensors"); },
               {"malformed JSON"});
  // From disk, config errors name the config file.
  const TempDir dir;
  write_bytes(dir.file("model.safetensors"), bytes);
  write_text(dir.file("config.json"), "{\"dim\": true}");
  expect_error([&] { load_model(dir.path()); }, {dir.file("config.json"), "dim"});
}

}  // namespace
}  // namespace sinkgraph::models

namespace sinkgraph::models {
namespace {

// Note [Checkpoints are read, not mapped]: a checkpoint truncated or rewritten
// while it loads, at many moments of the load, in every format (a llama2.c
// file, a safetensors folder, a sharded Hugging Face folder). Each load gives
// the model whole (the change came after the read) or one sinkgraph::Error
// naming the file; never a crash (the mapped reader died of SIGBUS).
TEST(models_checkpoint, FilesTruncatedOrRewrittenWhileLoadingAreErrorsNotCrashes) {
  LlamaConfig c = small_config();
  c.dim = 128;
  c.hidden_dim = 384;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.n_layers = 4;
  c.vocab_size = 2048;
  c.max_seq_len = 16;
  const LlamaModel m = random_model(c, 11);
  const TempDir dir;
  struct Case {
    std::string load_path, victim;  // what load_model opens; the file changed under it
  };
  const std::string bin = dir.file("m.bin");
  save_model(m, bin, CheckpointFormat::llama2c);
  const std::string st = dir.file("st");
  save_model(m, st, CheckpointFormat::safetensors);
  const std::string hf = dir.file("hf");
  save_hf(m, hf, DType::f32, 3);
  std::vector<Case> cases{{bin, bin}, {st, st + "/model.safetensors"}};
  for (const auto& entry : fs::directory_iterator(hf)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model-") && name.ends_with(".safetensors"))
      cases.push_back({hf, entry.path().string()});
  }
  ASSERT_EQ(cases.size(), 5U);
  std::mt19937 rng(2026);
  int loaded = 0, refused = 0;
  for (const Case& k : cases) {
    const Bytes original = read_bytes(k.victim);
    for (int round = 0; round < 12; ++round) {
      write_bytes(k.victim, original);
      const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 600)(rng));
      const bool rewrite = round % 3 == 2;
      const auto cut = std::uniform_int_distribution<std::uint64_t>(0, original.size() - 1)(rng);
      std::thread change([&] {
        std::this_thread::sleep_for(delay);
        if (rewrite) {  // rewritten in place with other bytes of the same size
          Bytes other = original;
          for (std::size_t i = cut; i < other.size(); i += 4096) other[i] ^= 0x5a;
          std::ofstream(k.victim, std::ios::binary | std::ios::in)
              .write(reinterpret_cast<const char*>(other.data()),
                     static_cast<std::streamsize>(other.size()));
        } else {
          fs::resize_file(k.victim, cut);
        }
      });
      try {
        const LlamaModel got = load_model(k.load_path);
        EXPECT_EQ(got.config().dim, c.dim);
        ++loaded;
      } catch (const Error& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find(k.load_path == hf ? hf : k.victim), std::string::npos)
            << e.what();
      }
      change.join();
    }
  }
  // Both outcomes happen over these moments (the load takes about a millisecond).
  EXPECT_GT(loaded + refused, 0);
  std::cout << loaded << " loads whole, " << refused << " refused\n";
}

}  // namespace
}  // namespace sinkgraph::models
