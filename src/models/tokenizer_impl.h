#pragma once
// The tables behind sinkgraph::models::Tokenizer (include/sinkgraph/tokenizer.h),
// shared by its two readers: tokenizer.cpp (the engine and GGUF vocabularies)
// and tokenizer_hf.cpp (Hugging Face tokenizer.json).
//
// Note [One engine, three front ends]: SentencePiece's BPE, GPT-2's byte-level
// BPE and Hugging Face's BPE model differ in where text is split and in what
// orders the merges, not in the loop itself. So a Tokenizer is one pipeline
// configured by its reader:
//   1. text -> segments: added tokens (user-defined always, control with
//      parse_special) are cut out whole; SentencePiece escapes spaces to U+2581
//      (and adds the prefix) before this cut, as sentencepiece's normalizer
//      runs before its matcher, Hugging Face after it;
//   2. each text segment -> normalizers (NFC, Prepend, Replace) -> words, by
//      the pre-tokenizers in order (Metaspace, regex Split, ByteLevel);
//   3. each word -> ids: characters, merged pairwise either by the score of the
//      merged token (SentencePiece) or by the rank of the pair (merges lists);
//      what stays without a token falls back to byte tokens <0xXX>, else to
//      unk (consecutive unks fused where the reference fuses them), else is
//      dropped, as Hugging Face drops it.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sinkgraph/tokenizer.h"

namespace sinkgraph::models {

namespace tokenizer_detail {

// Bounds on what a file may ask of us (Note [Tokenizer bounds] in tokenizer.cpp).
constexpr std::size_t kMaxTokens = std::size_t{1} << 22;
constexpr std::size_t kMaxMerges = std::size_t{1} << 23;
constexpr std::size_t kMaxTokenBytes = std::size_t{1} << 16;
constexpr std::size_t kMaxAddedTokens = std::size_t{1} << 16;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using TextMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// A compiled PCRE2 pattern (UTF and Unicode properties on); immutable, shared.
class Regex;
// Compiles `pattern` (a plain string when `literal`); a bad pattern is an
// Error naming `what`.
std::shared_ptr<const Regex> compile_regex(std::string_view pattern, const std::string& what,
                                           bool literal = false);

// The pre-tokenizer regexes llama.cpp and Hugging Face use.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

enum class Prepend : std::uint8_t { never, first, always };

struct Normalizer {
  enum class Kind : std::uint8_t { nfc, prepend, replace };
  Kind kind = Kind::nfc;
  std::string from, to;  // prepend: `to`; replace: every `from` by `to`
};

struct PreTokenizer {
  enum class Kind : std::uint8_t { metaspace, split, byte_level };
  Kind kind = Kind::split;
  // metaspace: spaces become `replacement`, which is prepended per `prepend`;
  // split_words cuts before each replacement.
  std::string replacement;
  Prepend prepend = Prepend::never;
  bool split_words = false;
  // split: the matches of `regex` and the text between them become words.
  // byte_level: the same with GPT-2's pattern when `regex` is set, then bytes
  // map to characters (always the last step).
  std::shared_ptr<const Regex> regex;
  bool add_prefix_space = false;  // byte_level: a space before a segment that has none
};

struct AddedToken {
  std::string text;
  std::int32_t id = 0;
  bool control = false;  // matched only with parse_special
};

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  using Type = Vocabulary::Type;
  enum class Merge : std::uint8_t { by_score, by_rank };

  std::string source;
  std::vector<std::string> tokens;
  std::vector<std::uint8_t> types;  // Vocabulary::Type of each token
  std::vector<float> scores;        // by_score
  std::int64_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false;

  // Step 1.
  bool escape_whole_text = false;                   // SentencePiece: ' ' -> U+2581 before the cut
  bool prefix_whole_text = false;                   // ... and U+2581 before non-empty text
  std::vector<tokenizer_detail::AddedToken> added;  // user-defined and control tokens
  // Step 2.
  std::vector<tokenizer_detail::Normalizer> normalizers;
  std::vector<tokenizer_detail::PreTokenizer> pre_tokenizers;
  // Step 3.
  Merge merge = Merge::by_score;
  // by_rank: (left id << 32 | right id) -> (rank, merged id).
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is a token is that token (Llama 3)

  // Decoding.
  std::string space_marker;          // decodes to ' ' (U+2581 for SentencePiece); empty: none
  bool decode_byte_level = false;    // GPT-2's characters -> bytes
  bool strip_leading_space = false;  // decode() drops one leading ' '
  bool unknown_as_question = false;  // sentencepiece's " \u2047 " for unk

  // Derived by finish().
  tokenizer_detail::TextMap text_ids;  // tokens that text reaches (normal, user-defined, unused)
  std::array<std::int32_t, 256> byte_ids{};                        // -1: no <0xXX> token
  std::array<std::vector<std::int32_t>, 256> added_by_first_byte;  // into `added`, longest first

  // Checks the tables and derives the lookups; errors name `source`.
  void finish();
  std::vector<std::int64_t> encode(std::string_view text, bool with_bos, bool parse_special) const;
  std::string piece(std::int64_t id) const;

 private:
  void encode_segment(std::string_view text, bool at_start, std::vector<std::int64_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int64_t>& out) const;
  void merge_by_score(std::string_view word, std::vector<std::int64_t>& out) const;
  void merge_by_rank(std::string_view word, std::vector<std::int64_t>& out) const;
  // A piece of text with no token: its bytes' tokens, else unk, else nothing.
  void fall_back(std::string_view text, std::vector<std::int64_t>& out) const;
};

namespace tokenizer_detail {
// Adds the merges (left, right), ranked in order, to a finished `t`: both
// sides and their concatenation must be tokens that text reaches.
void add_merges(Tokenizer::Impl& t,
                const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
                const std::string& source);
}  // namespace tokenizer_detail

}  // namespace sinkgraph::models
