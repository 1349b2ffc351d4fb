// The tokenizer a checkpoint carries (docs/tokenizers.md, "Which checkpoints
// carry one"): a GGUF file's tokenizer.ggml.* metadata, or a Hugging Face
// folder's tokenizer.json with the special tokens of its config.json.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/gguf.h"
#include "models/safetensors_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/tokenizer.h"

namespace sinkgraph::models {
namespace {

namespace fs = std::filesystem;
using detail::GgufFile;
using detail::GgufValue;

// A tokenizer.json of a large vocabulary (Qwen2's 151k tokens) is ~11 MB.
constexpr std::uint64_t kMaxTokenizerJsonBytes = std::uint64_t{256} << 20;
// The first bytes of a GGUF file read for its metadata: a 150k-token
// vocabulary with its merges is ~10 MB; a file whose metadata runs past
// this is read whole.
constexpr std::uint64_t kMetadataPrefixBytes = std::uint64_t{32} << 20;

// The first `limit` bytes of `path` (all of them when it is shorter).
std::vector<std::uint8_t> read_prefix(const std::string& path, std::uint64_t limit) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, size, "checkpoint");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(std::min(size, limit)));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;  // a file that shrank: what was read is parsed, and says so
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

GgufFile read_metadata(const std::string& path, std::vector<std::uint8_t>& bytes) {
  bytes = read_prefix(path, kMetadataPrefixBytes);
  try {
    return detail::parse_gguf_metadata(bytes, path);
  } catch (const Error&) {
    if (bytes.size() < kMetadataPrefixBytes) throw;  // the whole file: its own error
  }
  bytes = read_prefix(path, ~std::uint64_t{0});
  return detail::parse_gguf_metadata(bytes, path);
}

std::vector<float> floats_of(const GgufFile& f, const char* key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return {};
  SG_CHECK(v->is_array &&
               (v->type == detail::GgufValueType::f32 || v->type == detail::GgufValueType::f64),
           f.name, ": metadata ", key, " must be an array of floats");
  return {v->floats.begin(), v->floats.end()};
}

std::vector<std::int32_t> ints_of(const GgufFile& f, const char* key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return {};
  SG_CHECK(v->is_array && v->arrays.empty() && v->floats.empty() && v->strings.empty(), f.name,
           ": metadata ", key, " must be an array of integers");
  std::vector<std::int32_t> out;
  out.reserve(v->size());
  for (const std::int64_t i : v->ints) {
    SG_CHECK(i >= INT32_MIN && i <= INT32_MAX, f.name, ": metadata ", key, " holds ", i);
    out.push_back(static_cast<std::int32_t>(i));
  }
  for (const std::uint64_t u : v->uints) {
    SG_CHECK(u <= INT32_MAX, f.name, ": metadata ", key, " holds ", u);
    out.push_back(static_cast<std::int32_t>(u));
  }
  return out;
}

std::optional<Tokenizer> gguf_tokenizer(const std::string& path) {
  std::vector<std::uint8_t> bytes;
  const GgufFile f = read_metadata(path, bytes);
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model || *model == "none" || *model == "no_vocab") return std::nullopt;
  Vocabulary v;
  if (*model == "llama") {
    v.kind = Vocabulary::Kind::sentencepiece;
  } else if (*model == "gpt2") {
    v.kind = Vocabulary::Kind::bpe;
  } else {
    SG_CHECK(false, path, ": metadata tokenizer.ggml.model is \"", *model,
             "\"; sinkgraph reads \"llama\" (SentencePiece-style) and \"gpt2\" (byte-level BPE)");
  }
  const auto* tokens = f.get_strings("tokenizer.ggml.tokens");
  SG_CHECK(tokens != nullptr, path, ": metadata tokenizer.ggml.tokens is missing");
  v.tokens = *tokens;
  v.scores = floats_of(f, "tokenizer.ggml.scores");
  v.token_types = ints_of(f, "tokenizer.ggml.token_type");
  if (const auto* merges = f.get_strings("tokenizer.ggml.merges")) v.merges = *merges;
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  v.bos = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  v.eos = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
  v.unk = f.get_int("tokenizer.ggml.unknown_token_id").value_or(-1);
  // llama.cpp's defaults: a SentencePiece vocabulary adds BOS and a space
  // prefix, a byte-level one neither, unless the file says.
  const bool spm = v.kind == Vocabulary::Kind::sentencepiece;
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  return Tokenizer::from_vocabulary(std::move(v), path);
}

// A token id from config.json: an integer, or the first of a list (Llama
// 3's several end-of-sequence ids); -1 when absent or null.
std::int64_t config_token(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return -1;
  const nlohmann::json& v = j.at(key).is_array() && !j.at(key).empty() ? j.at(key)[0] : j.at(key);
  SG_CHECK(v.is_number_integer(), source, ": \"", key, "\" must be a token id, got ",
           detail::brief(v));
  return v.get<std::int64_t>();
}

std::optional<Tokenizer> hf_tokenizer(const fs::path& folder) {
  const fs::path json = folder / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(json, ec)) return std::nullopt;
  Tokenizer tok = Tokenizer::from_hf_json(
      read_text_file(json.string(), kMaxTokenizerJsonBytes, "tokenizer"), json.string());
  const std::string config_path = (folder / "config.json").string();
  const nlohmann::json config = detail::parse_json(read_text_file(config_path, 1'000'000, "config"),
                                                   config_path, "the config");
  std::int64_t bos = config_token(config, "bos_token_id", config_path);
  std::int64_t eos = config_token(config, "eos_token_id", config_path);
  if (bos < 0) bos = tok.bos();
  if (eos < 0) eos = tok.eos();
  return tok.with_special_tokens(bos, eos, tok.add_bos());
}

}  // namespace

std::optional<Tokenizer> load_tokenizer(const std::string& model_path) {
  switch (checkpoint_format(model_path)) {
    case CheckpointFormat::llama2c:
      return std::nullopt;  // llama2.c's tokenizer.bin is a file of its own
    case CheckpointFormat::gguf:
      return gguf_tokenizer(model_path);
    case CheckpointFormat::safetensors:
    case CheckpointFormat::hf: {
      std::error_code ec;
      const fs::path p(model_path);
      return hf_tokenizer(fs::is_directory(p, ec) ? p : p.parent_path());
    }
  }
  return std::nullopt;
}

}  // namespace sinkgraph::models
