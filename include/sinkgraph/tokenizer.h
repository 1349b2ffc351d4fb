#pragma once
// Text in and out: the tokenizers a GGUF file or a Hugging Face folder
// carries (docs/tokenizers.md).
//
//   - SentencePiece-style BPE (GGUF tokenizer model "llama"): spaces become
//     U+2581, pieces merge by score, characters without a piece fall back to
//     byte tokens <0xXX>;
//   - GPT-2-style byte-level BPE (GGUF model "gpt2"): a pre-tokenizer regex
//     splits the text, bytes map to printable characters, merges apply by rank;
//   - Hugging Face tokenizer.json of the two families a Llama or Qwen2
//     checkpoint ships (model "BPE" with byte fallback and Metaspace, or with a
//     ByteLevel pre-tokenizer).
//
//   auto tok = sinkgraph::models::Tokenizer::from_hf_json(text, "tokenizer.json");
//   std::vector<std::int64_t> ids = tok.encode("Once upon a time", /*add_bos=*/true);
//   std::string back = tok.decode(ids);  // "Once upon a time"
//
// A Tokenizer is immutable once made: copies share their tables, and every
// member is safe to call from several threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sinkgraph/export.h"

namespace sinkgraph::models {

// A vocabulary as GGUF's tokenizer.ggml.* keys carry it.
struct SG_API Vocabulary {
  enum class Kind : std::uint8_t {
    sentencepiece,  // GGUF tokenizer.ggml.model "llama"
    bpe,            // GGUF tokenizer.ggml.model "gpt2"
  };
  // llama.cpp's token types (tokenizer.ggml.token_type).
  enum Type : std::int32_t {
    undefined = 0,  // read as normal
    normal = 1,
    unknown = 2,
    control = 3,       // BOS, EOS...: matched in text only with parse_special, decode to nothing
    user_defined = 4,  // always matched whole in text
    unused = 5,
    byte = 6,  // <0xXX>
  };

  Kind kind = Kind::sentencepiece;
  std::vector<std::string> tokens;
  std::vector<float> scores;  // one per token; sentencepiece needs them, bpe ignores them
  std::vector<std::int32_t> token_types;  // one per token, or empty (all normal)
  std::vector<std::string> merges;        // bpe: "left right", rank = index
  // bpe: tokenizer.ggml.pre, which names the pre-tokenizer regex: "default" or
  // "gpt2" (GPT-2's), "llama-bpe" or "llama3" (Llama 3's), "qwen2".
  std::string pre = "default";
  std::int64_t bos = -1, eos = -1, unk = -1;  // -1: none
  bool add_bos = true;                        // what encode's add_bos = true adds
  bool add_space_prefix = true;               // sentencepiece: a space before the text
};

class SG_API Tokenizer {
 public:
  // Validates `v` (sizes agree, ids in range, no two tokens that text can
  // reach share a text, merges name tokens, bounded sizes); errors name `source`.
  static Tokenizer from_vocabulary(Vocabulary v, const std::string& source);
  // A Hugging Face tokenizer.json; what it cannot be is refused with one line
  // naming the field (docs/tokenizers.md).
  static Tokenizer from_hf_json(std::string_view tokenizer_json, const std::string& source);

  // Token ids of `text`; a BOS first when add_bos and the vocabulary has one.
  // Control tokens written in the text (say "<s>") are matched whole only
  // with parse_special; user-defined tokens always are. Bytes that are not
  // UTF-8 are tokenized as bytes, never refused.
  std::vector<std::int64_t> encode(std::string_view text, bool add_bos,
                                   bool parse_special = false) const;
  // The text of a whole sequence: byte tokens become their bytes, control
  // tokens nothing, and the space a SentencePiece prefix added is dropped.
  // The result is the raw bytes: a sequence cut inside a character is not
  // valid UTF-8. An id out of range is an Error.
  std::string decode(std::span<const std::int64_t> ids) const;
  // One token's text for streaming output (decode without dropping the prefix
  // space); byte tokens give their raw byte.
  std::string piece(std::int64_t id) const;
  // The vocabulary's text of token `id` as stored ("▁the", "Ġthe", "<0x0A>").
  const std::string& token_text(std::int64_t id) const;

  std::int64_t vocab_size() const;
  std::int64_t bos() const;  // -1: none
  std::int64_t eos() const;  // -1: none
  std::int64_t unk() const;  // -1: none
  bool add_bos() const;
  // A copy with other BOS/EOS ids (say from a Hugging Face config.json, which
  // tokenizer.json does not carry); -1 for none.
  Tokenizer with_special_tokens(std::int64_t bos, std::int64_t eos, bool add_bos) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The tokenizer the checkpoint at `model_path` carries (any path
// load_model() reads): a GGUF file's tokenizer.ggml.* metadata (only the
// file's first bytes are read), or the tokenizer.json beside a safetensors
// checkpoint with the BOS/EOS ids of its config.json. nullopt when it has
// none (a llama2.c file, a folder without tokenizer.json, a GGUF file without
// a vocabulary); a malformed one is a sinkgraph::Error naming the file.
SG_API std::optional<Tokenizer> load_tokenizer(const std::string& model_path);

}  // namespace sinkgraph::models
