// The tokenizer engine (Note [One engine, three front ends] in tokenizer_impl.h)
// and its GGUF front end, Tokenizer::from_vocabulary. tokenizer_hf.cpp reads
// Hugging Face's tokenizer.json into the same tables.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <utility>

#include "models/tokenizer_impl.h"
#include "sinkgraph/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <uninorm.h>

namespace sinkgraph::models {

namespace tokenizer_detail {

// Note [Tokenizer bounds]: a vocabulary comes from a file we do not trust, so
// every size it sets is bounded before we allocate by it (kMaxTokens tokens of
// at most kMaxTokenBytes, kMaxMerges merges; the largest real vocabularies
// hold about 256K tokens). Encoding is O(n log n) in the text's length
// whatever the tables say: merges run on a heap, added tokens are looked up by
// their first byte. A regex from a tokenizer.json could backtrack without end,
// so matching runs under PCRE2's match limit and hitting it is an Error.

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581
constexpr std::uint32_t kMatchLimit = 10'000'000;

// The length of the well-formed UTF-8 character at s[i] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k) { return i + k < s.size() && (at(k) & 0xC0U) == 0x80U; };
  const unsigned c = at(0);
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return cont(1) ? 2 : 0;
  if (c < 0xF0) {
    if (!cont(1) || !cont(2)) return 0;
    if ((c == 0xE0 && at(1) < 0xA0) || (c == 0xED && at(1) >= 0xA0)) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if ((c == 0xF0 && at(1) < 0x90) || (c == 0xF4 && at(1) >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

// The end of the well-formed UTF-8 run starting at s[i].
std::size_t valid_run_end(std::string_view s, std::size_t i) {
  while (i < s.size()) {
    const std::size_t n = utf8_length(s, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    SG_ASSERT(cp < 0x10000, "only the byte map's characters are encoded here");
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Note [GPT-2's byte map]: byte-level BPE works on characters, not bytes, and
// gives every byte a printable character: the printable Latin-1 bytes
// (! to ~, ¡ to ¬, ® to ÿ) stand for themselves and the other 68 take
// U+0100 onwards in byte order (GPT-2's bytes_to_unicode), so ' ' is 'Ġ'
// (U+0120) and '\n' is 'Ċ' (U+010A).
struct ByteMap {
  std::array<std::string, 256> chars;     // byte -> its character, UTF-8
  std::array<std::int16_t, 512> bytes{};  // code point -> byte, -1: none
  ByteMap() {
    bytes.fill(-1);
    std::uint32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const std::uint32_t cp = printable ? b : next++;
      append_utf8(chars[b], cp);
      bytes[cp] = static_cast<std::int16_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// The bytes a byte-level token stands for; a token with a character outside
// the map (an added token such as "<|endoftext|>" has none, but a hostile one
// might) stands for its own text, as Hugging Face's ByteLevel decoder does.
std::string byte_level_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    std::uint32_t cp = 0x10000;  // no byte
    if (n == 1) cp = static_cast<unsigned char>(text[i]);
    if (n == 2) {
      cp = ((static_cast<unsigned char>(text[i]) & 0x1FU) << 6) |
           (static_cast<unsigned char>(text[i + 1]) & 0x3FU);
    }
    if (cp >= byte_map().bytes.size() || byte_map().bytes[cp] < 0) return std::string(text);
    out += static_cast<char>(byte_map().bytes[cp]);
    i += n;
  }
  return out;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  SG_ASSERT(!from.empty());
  std::string out;
  std::size_t last = 0;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, last)) {
    out.append(s, last, at - last).append(to);
    last = at + from.size();
  }
  if (last == 0) return;
  out.append(s, last);
  s = std::move(out);
}

// Unicode NFC of the well-formed runs of `s` (libunistring); other bytes stay.
std::string nfc(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t end = valid_run_end(s, i);
    if (end > i) {
      std::size_t length = 0;
      std::uint8_t* normalized =
          u8_normalize(UNINORM_NFC, reinterpret_cast<const std::uint8_t*>(s.data() + i), end - i,
                       nullptr, &length);
      SG_CHECK(normalized != nullptr, "tokenizer: Unicode NFC normalization failed");
      out.append(reinterpret_cast<const char*>(normalized), length);
      std::free(normalized);  // NOLINT(cppcoreguidelines-no-malloc): libunistring's buffer
      i = end;
    } else {
      out += s[i++];
    }
  }
  return out;
}

void check_special_id(std::int64_t id, std::size_t n, const char* name, const std::string& source) {
  SG_CHECK(id >= -1 && id < static_cast<std::int64_t>(n), source, ": the ", name, " id ", id,
           " is not a token of a vocabulary of ", n);
}

}  // namespace

class Regex {
 public:
  Regex(pcre2_code* code, std::string what)
      : code_(code, &pcre2_code_free), what_(std::move(what)) {
    // JIT when the platform has it; the interpreter otherwise (same results).
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
    context_.reset(pcre2_match_context_create(nullptr));
    SG_CHECK(context_ != nullptr, what_, ": out of memory");
    pcre2_set_match_limit(context_.get(), kMatchLimit);
  }

  // Appends the pieces of `text` (well-formed UTF-8): each match and each gap
  // between matches (Hugging Face's "Isolated" split).
  void split(std::string_view text, std::vector<std::string>& out) const {
    const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    SG_CHECK(data != nullptr, what_, ": out of memory");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t last = 0;  // end of the last piece
    std::size_t pos = 0;   // where the next match may start
    while (pos < text.size()) {
      const int rc = pcre2_match(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                 data.get(), context_.get());
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> message{};
        pcre2_get_error_message(rc, message.data(), message.size());
        SG_CHECK(false, what_,
                 ": matching failed: ", reinterpret_cast<const char*>(message.data()));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const std::size_t begin = ovector[0], end = ovector[1];
      // \K can report a match that ends before it starts or starts before `last`.
      SG_CHECK(begin <= end && begin >= last, what_,
               ": the pattern reports a match that goes back");
      if (begin == end) {  // an empty match splits nothing: move past one character
        pos = begin + std::max<std::size_t>(1, utf8_length(text, begin));
        continue;
      }
      if (begin > last) out.emplace_back(text.substr(last, begin - last));
      out.emplace_back(text.substr(begin, end - begin));
      last = pos = end;
    }
    if (last < text.size()) out.emplace_back(text.substr(last));
  }

 private:
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code_{nullptr, &pcre2_code_free};
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context_{
      nullptr, &pcre2_match_context_free};
  std::string what_;
};

std::shared_ptr<const Regex> compile_regex(std::string_view pattern, const std::string& what,
                                           bool literal) {
  SG_CHECK(valid_run_end(pattern, 0) == pattern.size(), what, ": the pattern is not UTF-8");
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0U), &error,
                                   &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    SG_CHECK(false, what, ": bad regex at offset ", offset, ": ",
             reinterpret_cast<const char*>(message.data()));
  }
  return std::make_shared<const Regex>(code, what);
}

}  // namespace tokenizer_detail

using namespace tokenizer_detail;  // NOLINT(google-build-using-namespace): this file's own helpers

// ---- checking the tables ----

void Tokenizer::Impl::finish() {
  const std::size_t n = tokens.size();
  SG_CHECK(n > 0, source, ": the vocabulary has no tokens");
  SG_CHECK(n <= kMaxTokens, source, ": the vocabulary has ", n, " tokens, more than the ",
           kMaxTokens, " we accept");
  SG_ASSERT(types.size() == n);
  SG_ASSERT(merge != Merge::by_score || scores.size() == n);
  check_special_id(bos, n, "BOS", source);
  check_special_id(eos, n, "EOS", source);
  check_special_id(unk, n, "unknown token", source);
  byte_ids.fill(-1);
  text_ids.clear();
  text_ids.reserve(n);
  std::vector<std::int32_t> user_defined;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& text = tokens[i];
    const auto id = static_cast<std::int32_t>(i);
    SG_CHECK(text.size() <= kMaxTokenBytes, source, ": token ", i, " is ", text.size(),
             " bytes long, more than the ", kMaxTokenBytes, " we accept");
    switch (types[i]) {
      case Type::byte: {
        unsigned value = 0;
        char end = 0;
        SG_CHECK(text.size() == 6 && std::sscanf(text.c_str(), "<0x%2X%c", &value, &end) == 2 &&
                     end == '>',
                 source, ": token ", i, " is a byte token but its text is not <0xXX>");
        SG_CHECK(byte_ids[value] < 0, source, ": tokens ", byte_ids[value], " and ", i,
                 " are both the byte token ", text);
        byte_ids[value] = id;
        break;
      }
      case Type::user_defined:
        SG_CHECK(!text.empty(), source, ": token ", i, " is user-defined but empty");
        user_defined.push_back(id);
        [[fallthrough]];
      case Type::undefined:
      case Type::normal:
      case Type::unused: {
        if (text.empty()) break;  // text never reaches it; it decodes to nothing
        const auto [it, fresh] = text_ids.emplace(text, id);
        SG_CHECK(fresh, source, ": tokens ", it->second, " and ", i, " are both \"",
                 text.substr(0, 40), "\"");
        break;
      }
      case Type::unknown:
      case Type::control:
        break;
      default:
        SG_CHECK(false, source, ": token ", i, " has type ", int{types[i]},
                 ", not one of llama.cpp's token types 0 to 6");
    }
  }
  // Added tokens: the user-defined ones, unless the reader listed them (a
  // tokenizer.json lists its added tokens itself).
  if (added.empty()) {
    for (const std::int32_t id : user_defined) added.push_back({tokens[id], id, false});
    for (std::size_t i = 0; i < n; ++i) {
      if (types[i] == Type::control && !tokens[i].empty()) {
        added.push_back({tokens[i], static_cast<std::int32_t>(i), true});
      }
    }
  }
  SG_CHECK(added.size() <= kMaxAddedTokens, source, ": ", added.size(),
           " added tokens, more than the ", kMaxAddedTokens, " we accept");
  for (auto& bucket : added_by_first_byte) bucket.clear();
  for (std::size_t k = 0; k < added.size(); ++k) {
    SG_ASSERT(!added[k].text.empty());
    added_by_first_byte[static_cast<unsigned char>(added[k].text[0])].push_back(
        static_cast<std::int32_t>(k));
  }
  // Longest first, so the first match at a position is the longest one
  // (leftmost-longest, as sentencepiece's prefix matcher and Hugging Face's
  // added vocabulary match).
  for (auto& bucket : added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::int32_t a, std::int32_t b) {
      return added[a].text.size() > added[b].text.size();
    });
  }
}

// ---- encoding ----

std::vector<std::int64_t> Tokenizer::Impl::encode(std::string_view text, bool with_bos,
                                                  bool parse_special) const {
  std::vector<std::int64_t> out;
  if (with_bos && bos >= 0) out.push_back(bos);
  std::string escaped;
  if (escape_whole_text) {
    escaped.reserve(text.size() + kSpaceMarker.size());
    if (prefix_whole_text && !text.empty()) escaped = kSpaceMarker;
    for (const char c : text) {
      if (c == ' ') {
        escaped += kSpaceMarker;
      } else {
        escaped += c;
      }
    }
    text = escaped;
  }
  std::size_t segment = 0;
  for (std::size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const std::int32_t k : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added[k];
      if ((!a.control || parse_special) && text.substr(i).starts_with(a.text)) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > segment) encode_segment(text.substr(segment, i - segment), segment == 0, out);
    out.push_back(hit->id);
    i += hit->text.size();
    segment = i;
  }
  if (segment < text.size()) encode_segment(text.substr(segment), segment == 0, out);
  return out;
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_start,
                                     std::vector<std::int64_t>& out) const {
  std::string normalized(text);
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::Kind::nfc:
        normalized = nfc(normalized);
        break;
      case Normalizer::Kind::prepend:
        if (!normalized.empty()) normalized.insert(0, n.to);
        break;
      case Normalizer::Kind::replace:
        replace_all(normalized, n.from, n.to);
        break;
    }
  }
  std::vector<std::string> words{std::move(normalized)};
  std::vector<std::string> next;
  for (const PreTokenizer& p : pre_tokenizers) {
    next.clear();
    for (std::size_t w = 0; w < words.size(); ++w) {
      std::string& word = words[w];
      switch (p.kind) {
        case PreTokenizer::Kind::metaspace: {
          replace_all(word, " ", p.replacement);
          // Hugging Face prepends only to text that does not start with the
          // marker already (sentencepiece always prepends: its reader uses
          // prefix_whole_text instead).
          const bool prepend =
              p.prepend == Prepend::always || (p.prepend == Prepend::first && at_start && w == 0);
          if (prepend && !word.starts_with(p.replacement)) word.insert(0, p.replacement);
          if (!p.split_words) {
            next.push_back(std::move(word));
            break;
          }
          std::size_t last = 0;
          for (std::size_t at = word.find(p.replacement, 1); at != std::string::npos;
               at = word.find(p.replacement, at + p.replacement.size())) {
            next.push_back(word.substr(last, at - last));
            last = at;
          }
          next.push_back(word.substr(last));
          break;
        }
        case PreTokenizer::Kind::split:
        case PreTokenizer::Kind::byte_level: {
          if (p.kind == PreTokenizer::Kind::byte_level && p.add_prefix_space &&
              !word.starts_with(' ')) {
            word.insert(0, " ");
          }
          if (p.regex == nullptr) {
            next.push_back(std::move(word));
            break;
          }
          // The regex sees well-formed UTF-8 only; a byte that is not is a
          // word of its own (Hugging Face cannot be given one).
          for (std::size_t i = 0; i < word.size();) {
            const std::size_t end = valid_run_end(word, i);
            if (end == i) {
              next.emplace_back(1, word[i++]);
              continue;
            }
            p.regex->split(std::string_view(word).substr(i, end - i), next);
            i = end;
          }
          break;
        }
      }
    }
    if (p.kind == PreTokenizer::Kind::byte_level) {
      for (std::string& word : next) {
        std::string mapped;
        mapped.reserve(word.size() * 2);
        for (const char c : word) mapped += byte_map().chars[static_cast<unsigned char>(c)];
        word = std::move(mapped);
      }
    }
    std::swap(words, next);
  }
  for (const std::string& word : words) {
    if (!word.empty()) encode_word(word, out);
  }
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<std::int64_t>& out) const {
  if (ignore_merges) {
    if (const auto it = text_ids.find(word); it != text_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (merge == Merge::by_score) {
    merge_by_score(word, out);
  } else {
    merge_by_rank(word, out);
  }
}

void Tokenizer::Impl::fall_back(std::string_view text, std::vector<std::int64_t>& out) const {
  if (byte_fallback && std::all_of(text.begin(), text.end(), [&](char c) {
        return byte_ids[static_cast<unsigned char>(c)] >= 0;
      })) {
    for (const char c : text) out.push_back(byte_ids[static_cast<unsigned char>(c)]);
    return;
  }
  if (unk < 0) return;  // dropped, as Hugging Face drops it
  if (fuse_unk && !out.empty() && out.back() == unk) return;
  out.push_back(unk);
}

namespace {

// A run of the word being merged: [begin, begin + size) of its text.
struct Symbol {
  std::size_t begin = 0, size = 0;  // size 0: merged into its left neighbour
  std::int32_t prev = -1, next = -1;
  std::int32_t id = -1;  // by_rank: its token (-1: none)
};

// The characters of `word`: well-formed UTF-8 characters, and each byte that
// is not part of one on its own.
std::vector<Symbol> characters(std::string_view word) {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = std::max<std::size_t>(1, utf8_length(word, i));
    const auto k = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({i, n, k - 1, k + 1, -1});
    i += n;
  }
  symbols.back().next = -1;
  return symbols;
}

}  // namespace

// Note [Merging by score]: sentencepiece's BPE (bpe_model.cc) and llama.cpp's
// llm_tokenizer_spm: every adjacent pair whose concatenation is a token that
// text may reach goes on a heap; the pair whose token scores highest merges
// first, the leftmost among equals; its new neighbours' pairs go on the heap;
// entries whose symbols changed since are skipped when popped. A merged token
// of type unused is split back into the two pieces it was made of
// (sentencepiece's "resegment"), and a character with no token falls back.
void Tokenizer::Impl::merge_by_score(std::string_view word, std::vector<std::int64_t>& out) const {
  std::vector<Symbol> symbols = characters(word);
  struct Pair {
    float score;
    std::int32_t left, right;
    std::size_t size;
  };
  const auto after = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(after)> heap(after);
  TextMap unused_parts_index;  // merged unused token -> index into unused_parts
  std::vector<std::pair<std::string_view, std::string_view>> unused_parts;
  const auto consider = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const std::string_view text = word.substr(l.begin, l.size + r.size);
    const auto it = text_ids.find(text);
    if (it == text_ids.end()) return;
    heap.push({scores[it->second], left, right, text.size()});
    if (types[it->second] == Type::unused) {
      // The last pair made wins, as in sentencepiece's rev_merge.
      unused_parts_index.insert_or_assign(std::string(text),
                                          static_cast<std::int32_t>(unused_parts.size()));
      unused_parts.emplace_back(word.substr(l.begin, l.size), word.substr(r.begin, r.size));
    }
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) {
    consider(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
  }
  while (!heap.empty()) {
    const Pair top = heap.top();
    heap.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.size == 0 || r.size == 0 || l.next != top.right || l.size + r.size != top.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    consider(l.prev, top.left);
    consider(top.left, l.next);
  }
  // Resegmentation, recursive over unused tokens (each split is shorter).
  const auto emit = [&](const auto& self, std::string_view text) -> void {
    const auto it = text_ids.find(text);
    if (it != text_ids.end() && types[it->second] != Type::unused) {
      out.push_back(it->second);
      return;
    }
    if (it != text_ids.end()) {
      if (const auto parts = unused_parts_index.find(text); parts != unused_parts_index.end()) {
        self(self, unused_parts[parts->second].first);
        self(self, unused_parts[parts->second].second);
        return;
      }
    }
    fall_back(text, out);
  };
  for (std::int32_t k = 0; k >= 0; k = symbols[k].next) {
    emit(emit, word.substr(symbols[k].begin, symbols[k].size));
  }
}

// Note [Merging by rank]: GPT-2's BPE as Hugging Face's BPE model and
// llama.cpp's llm_tokenizer_bpe run it: each character is looked up (no token:
// byte tokens with byte fallback, else unk, fused when the model fuses), then
// the adjacent pair of tokens with the lowest merge rank merges, the leftmost
// among equals, until no pair has a rank. Pairs are keyed by token ids, so a
// merge is one hash lookup.
void Tokenizer::Impl::merge_by_rank(std::string_view word, std::vector<std::int64_t>& out) const {
  std::vector<Symbol> symbols;
  std::vector<std::int64_t> fallback;  // the ids of characters without a token
  for (const Symbol& c : characters(word)) {
    const std::string_view text = word.substr(c.begin, c.size);
    if (const auto it = text_ids.find(text); it != text_ids.end()) {
      symbols.push_back({c.begin, c.size, -1, -1, it->second});
      continue;
    }
    fallback.clear();
    if (!symbols.empty() && symbols.back().id == unk) fallback.push_back(unk);  // for fuse_unk
    const std::size_t first = fallback.size();
    fall_back(text, fallback);
    for (std::size_t k = first; k < fallback.size(); ++k) {
      symbols.push_back({c.begin, 0, -1, -1, static_cast<std::int32_t>(fallback[k])});
    }
  }
  if (symbols.empty()) return;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    symbols[i].prev = static_cast<std::int32_t>(i) - 1;
    symbols[i].next = i + 1 < symbols.size() ? static_cast<std::int32_t>(i) + 1 : -1;
    symbols[i].size = 1;  // alive (the text is not needed any more)
  }
  struct Pair {
    std::int32_t rank, left, right, left_id, right_id, merged;
  };
  const auto after = [](const Pair& a, const Pair& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(after)> heap(after);
  const auto consider = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const std::int32_t a = symbols[left].id, b = symbols[right].id;
    if (a < 0 || b < 0) return;
    const auto key = (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
    const auto it = merges.find(key);
    if (it == merges.end()) return;
    heap.push({it->second.first, left, right, a, b, it->second.second});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) {
    consider(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
  }
  while (!heap.empty()) {
    const Pair top = heap.top();
    heap.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.size == 0 || r.size == 0 || l.next != top.right || l.id != top.left_id ||
        r.id != top.right_id) {
      continue;
    }
    l.id = top.merged;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    consider(l.prev, top.left);
    consider(top.left, l.next);
  }
  for (std::int32_t k = 0; k >= 0; k = symbols[k].next) out.push_back(symbols[k].id);
}

// ---- decoding ----

std::string Tokenizer::Impl::piece(std::int64_t id) const {
  SG_CHECK(id >= 0 && id < static_cast<std::int64_t>(tokens.size()), source, ": token id ", id,
           " is out of range for a vocabulary of ", tokens.size());
  const std::string& text = tokens[id];
  switch (types[id]) {
    case Type::control:
      return {};
    case Type::byte:
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    case Type::unknown:
      if (unknown_as_question) return " \xE2\x81\x87 ";  // sentencepiece's " ⁇ "
      break;
    default:
      break;
  }
  if (decode_byte_level) return byte_level_decode(text);
  if (!space_marker.empty()) {
    std::string out = text;
    replace_all(out, space_marker, " ");
    return out;
  }
  return text;
}

// ---- the GGUF front end ----

namespace {

// Note [GGUF pre-tokenizers]: tokenizer.ggml.pre names the regex llama.cpp
// splits byte-level text with before merging (llama-vocab.cpp). We know the
// three families a Llama or Qwen2 file carries and refuse the rest by name,
// rather than tokenizing with a regex the model was not trained on.
const char* pre_pattern(const std::string& pre, const std::string& source) {
  if (pre == "default" || pre == "gpt2") return kGpt2Pattern;
  if (pre == "llama-bpe" || pre == "llama3") return kLlama3Pattern;
  if (pre == "qwen2") return kQwen2Pattern;
  SG_CHECK(false, source, ": unsupported pre-tokenizer \"", pre.substr(0, 40),
           "\" (tokenizer.ggml.pre): known are default, gpt2, llama-bpe, llama3, qwen2");
  return nullptr;
}

}  // namespace

Tokenizer Tokenizer::from_vocabulary(Vocabulary v, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.source = source;
  const std::size_t n = v.tokens.size();
  SG_CHECK(n <= kMaxTokens, source, ": the vocabulary has ", n, " tokens, more than the ",
           kMaxTokens, " we accept");
  SG_CHECK(v.token_types.empty() || v.token_types.size() == n, source, ": ", v.token_types.size(),
           " token types for ", n, " tokens");
  t.types.resize(n, Vocabulary::normal);
  for (std::size_t i = 0; i < v.token_types.size(); ++i) {
    const std::int32_t type = v.token_types[i];
    SG_CHECK(type >= 0 && type <= Vocabulary::byte, source, ": token ", i, " has type ", type,
             ", not one of llama.cpp's token types 0 to 6");
    t.types[i] = static_cast<std::uint8_t>(type);
  }
  t.tokens = std::move(v.tokens);
  t.bos = v.bos;
  t.eos = v.eos;
  t.unk = v.unk;
  t.add_bos = v.add_bos;
  t.byte_fallback = true;
  if (v.kind == Vocabulary::Kind::sentencepiece) {
    SG_CHECK(v.scores.size() == n, source, ": ", v.scores.size(), " scores for ", n,
             " tokens (a sentencepiece vocabulary merges by score)");
    for (std::size_t i = 0; i < n; ++i) {
      SG_CHECK(std::isfinite(v.scores[i]), source, ": token ", i, " has score ", v.scores[i]);
    }
    t.scores = std::move(v.scores);
    t.merge = Impl::Merge::by_score;
    t.escape_whole_text = true;
    t.prefix_whole_text = v.add_space_prefix;
    t.fuse_unk = true;  // sentencepiece fuses runs of unknown pieces
    t.space_marker = kSpaceMarker;
    t.strip_leading_space = v.add_space_prefix;
    t.unknown_as_question = true;
    // merges, if a converter wrote any, are ignored: scores order the merges.
    t.finish();
    return Tokenizer(std::move(impl));
  }
  // GPT-2-style byte-level BPE.
  t.merge = Impl::Merge::by_rank;
  t.ignore_merges = v.pre == "llama-bpe" || v.pre == "llama3";  // as llama.cpp does
  PreTokenizer split;
  split.kind = PreTokenizer::Kind::split;
  split.regex = compile_regex(pre_pattern(v.pre, source), source + ": the pre-tokenizer regex");
  PreTokenizer bytes;
  bytes.kind = PreTokenizer::Kind::byte_level;
  t.pre_tokenizers = {split, bytes};
  t.decode_byte_level = true;
  t.finish();
  SG_CHECK(v.merges.size() <= kMaxMerges, source, ": ", v.merges.size(), " merges, more than the ",
           kMaxMerges, " we accept");
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(v.merges.size());
  for (std::size_t i = 0; i < v.merges.size(); ++i) {
    const std::string_view m = v.merges[i];
    // llama.cpp splits at the first space after the first byte.
    const std::size_t space = m.empty() ? std::string_view::npos : m.find(' ', 1);
    SG_CHECK(space != std::string_view::npos, source, ": merge ", i, " \"", m.substr(0, 40),
             "\" is not two tokens separated by a space");
    pairs.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  add_merges(t, pairs, source);
  return Tokenizer(std::move(impl));
}

void tokenizer_detail::add_merges(
    Tokenizer::Impl& t, const std::vector<std::pair<std::string_view, std::string_view>>& pairs,
    const std::string& source) {
  SG_CHECK(pairs.size() <= kMaxMerges, source, ": ", pairs.size(), " merges, more than the ",
           kMaxMerges, " we accept");
  t.merges.reserve(pairs.size());
  std::string joined;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::string_view left = pairs[i].first, right = pairs[i].second;
    const auto find = [&](std::string_view text) {
      const auto it = t.text_ids.find(text);
      SG_CHECK(it != t.text_ids.end(), source, ": merge ", i, " (\"", left.substr(0, 40), "\" \"",
               right.substr(0, 40), "\"): \"", text.substr(0, 80),
               "\" is not a token of the vocabulary");
      return it->second;
    };
    joined.assign(left).append(right);
    const std::int32_t a = find(left), b = find(right), merged = find(joined);
    const auto key = (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
    t.merges.emplace(key, std::pair{static_cast<std::int32_t>(i), merged});  // the first rank wins
  }
}

// ---- Tokenizer ----

std::vector<std::int64_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                            bool parse_special) const {
  return impl_->encode(text, add_bos, parse_special);
}

std::string Tokenizer::decode(std::span<const std::int64_t> ids) const {
  std::string out;
  for (const std::int64_t id : ids) out += impl_->piece(id);
  if (impl_->strip_leading_space && out.starts_with(' ')) out.erase(0, 1);
  return out;
}

std::string Tokenizer::piece(std::int64_t id) const { return impl_->piece(id); }

const std::string& Tokenizer::token_text(std::int64_t id) const {
  SG_CHECK(id >= 0 && id < vocab_size(), impl_->source, ": token id ", id,
           " is out of range for a vocabulary of ", vocab_size());
  return impl_->tokens[id];
}

std::int64_t Tokenizer::vocab_size() const {
  return static_cast<std::int64_t>(impl_->tokens.size());
}
std::int64_t Tokenizer::bos() const { return impl_->bos; }
std::int64_t Tokenizer::eos() const { return impl_->eos; }
std::int64_t Tokenizer::unk() const { return impl_->unk; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }

Tokenizer Tokenizer::with_special_tokens(std::int64_t bos, std::int64_t eos, bool add_bos) const {
  check_special_id(bos, impl_->tokens.size(), "BOS", impl_->source);
  check_special_id(eos, impl_->tokens.size(), "EOS", impl_->source);
  auto copy = std::make_shared<Impl>(*impl_);
  copy->bos = bos;
  copy->eos = eos;
  copy->add_bos = add_bos;
  return Tokenizer(std::move(copy));
}

}  // namespace sinkgraph::models
