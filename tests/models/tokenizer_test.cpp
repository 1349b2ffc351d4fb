// The tokenizers (include/sinkgraph/tokenizer.h) on vocabularies built by
// hand, with the ids each text must give worked out by hand from the
// algorithms' definitions (sentencepiece's BPE, GPT-2's BPE, Hugging Face's
// tokenizer.json); round trips; hostile vocabularies and files, each of which
// must be a sinkgraph::Error, never a crash or a hang. The comparison with the
// reference implementations themselves is python/tests/test_tokenizer.py.
#include "sinkgraph/tokenizer.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sinkgraph/error.h"

namespace sinkgraph::models {
namespace {

using Ids = std::vector<std::int64_t>;
using nlohmann::json;

const std::string kMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// ---- SentencePiece-style vocabularies ----

// <unk> <s> </s>, then the 256 byte tokens (ids 3 + byte), then `pieces`.
struct SpmVocab {
  Vocabulary v;
  std::int64_t byte(unsigned b) const { return 3 + b; }
  std::int64_t id(const std::string& piece) const {
    for (std::size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == piece) return static_cast<std::int64_t>(i);
    }
    ADD_FAILURE() << "no piece " << piece;
    return -1;
  }
};

SpmVocab spm_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool bytes = true) {
  SpmVocab s;
  Vocabulary& v = s.v;
  v.kind = Vocabulary::Kind::sentencepiece;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.scores = {0, 0, 0};
  v.token_types = {Vocabulary::unknown, Vocabulary::control, Vocabulary::control};
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  if (bytes) {
    for (unsigned b = 0; b < 256; ++b) {
      char text[8];
      std::snprintf(text, sizeof text, "<0x%02X>", b);
      v.tokens.emplace_back(text);
      v.scores.push_back(0);
      v.token_types.push_back(Vocabulary::byte);
    }
  }
  for (const auto& [piece, score] : pieces) {
    std::string text = piece;
    for (std::size_t at = text.find('_'); at != std::string::npos; at = text.find('_')) {
      text.replace(at, 1, kMarker);  // "_" stands for U+2581 in these tests
    }
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.token_types.push_back(Vocabulary::normal);
  }
  return s;
}

std::string marked(std::string text) {
  for (std::size_t at = text.find('_'); at != std::string::npos; at = text.find('_')) {
    text.replace(at, 1, kMarker);
  }
  return text;
}

SpmVocab hello_vocab() {
  return spm_vocab({{"_", -10},
                    {"h", -10},
                    {"e", -10},
                    {"l", -10},
                    {"o", -10},
                    {"w", -10},
                    {"r", -10},
                    {"d", -10},
                    {"ll", -1},
                    {"he", -2},
                    {"_h", -3},
                    {"lo", -4},
                    {"hell", -0.5F},
                    {"_w", -5},
                    {"or", -6},
                    {"_hell", -7}});
}

TEST(Tokenizer, SentencePieceMergesByScore) {
  const SpmVocab s = hello_vocab();
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  // "_hello_world": ll (-1), he (-2), then hell (-0.5, made by the first two),
  // then _w (-5) and or (-6); _h (-3) and lo (-4) went stale when h and the
  // second l were merged away; _hell (-7) last.
  const auto id = [&](const char* p) { return s.id(marked(p)); };
  EXPECT_EQ(t.encode("hello world", false),
            (Ids{id("_hell"), id("o"), id("_w"), id("or"), id("l"), id("d")}));
  EXPECT_EQ(t.encode("hello world", true),
            (Ids{1, id("_hell"), id("o"), id("_w"), id("or"), id("l"), id("d")}));
  EXPECT_EQ(t.decode(t.encode("hello world", true)), "hello world");
  EXPECT_EQ(t.piece(id("_w")), " w");
  EXPECT_EQ(t.piece(1), "");  // control tokens print nothing
  EXPECT_EQ(t.token_text(id("_w")), kMarker + "w");
  EXPECT_EQ(t.vocab_size(), 3 + 256 + 16);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.unk(), 0);
}

TEST(Tokenizer, SentencePieceTiesGoLeft) {
  SpmVocab s = spm_vocab({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -1}});
  s.v.add_space_prefix = false;
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  EXPECT_EQ(t.encode("abc", false), (Ids{s.id("ab"), s.id("c")}));
  EXPECT_EQ(t.encode("bcab", false), (Ids{s.id("bc"), s.id("ab")}));
}

TEST(Tokenizer, SentencePieceByteFallback) {
  const SpmVocab s = hello_vocab();
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  // é is C3 A9 and has no piece; 日 is E6 97 A5.
  EXPECT_EQ(t.encode("h\xC3\xA9", false), (Ids{s.id(marked("_h")), s.byte(0xC3), s.byte(0xA9)}));
  EXPECT_EQ(t.encode("\xE6\x97\xA5", false),
            (Ids{s.id(marked("_")), s.byte(0xE6), s.byte(0x97), s.byte(0xA5)}));
  EXPECT_EQ(t.decode(t.encode("h\xC3\xA9", false)), "h\xC3\xA9");
  EXPECT_EQ(t.piece(s.byte(0xC3)), "\xC3");
  // A newline has no piece either.
  EXPECT_EQ(t.encode("o\n", false), (Ids{s.id(marked("_")), s.id("o"), s.byte('\n')}));
}

TEST(Tokenizer, SentencePieceUnknownWithoutBytes) {
  SpmVocab s = spm_vocab({{"_", -1}, {"a", -1}}, /*bytes=*/false);
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  // sentencepiece fuses a run of unknown characters into one <unk>.
  EXPECT_EQ(t.encode("\xC3\xA9\xC3\xA9", false), (Ids{s.id(marked("_")), 0}));
  EXPECT_EQ(t.encode("\xC3\xA9"
                     "a\xC3\xA9",
                     false),
            (Ids{s.id(marked("_")), 0, s.id("a"), 0}));
  EXPECT_EQ(t.decode(Ids{s.id("a"), 0}), "a \xE2\x81\x87 ");  // sentencepiece's " ⁇ "
}

TEST(Tokenizer, SentencePieceUnusedPiecesAreSplitBack) {
  SpmVocab s = spm_vocab({{"a", -5}, {"b", -5}, {"ab", -1}, {"abb", -2}});
  s.v.add_space_prefix = false;
  s.v.token_types[s.id("ab")] = Vocabulary::unused;
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  EXPECT_EQ(t.encode("ab", false), (Ids{s.id("a"), s.id("b")}));
  // An unused piece still merges on the way to a used one.
  EXPECT_EQ(t.encode("abb", false), (Ids{s.id("abb")}));
}

TEST(Tokenizer, SentencePieceSpecialTokens) {
  SpmVocab s = spm_vocab({{"_", -1},
                          {"x", -1},
                          {"y", -1},
                          {"<", -1},
                          {"s", -1},
                          {">", -1},
                          {"<ud>", 0},
                          {"_x", -0.5F}});
  s.v.token_types[s.id("<ud>")] = Vocabulary::user_defined;
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  // User-defined tokens are matched whole; the space prefix goes before the
  // text only (sentencepiece's normalizer runs before its matcher).
  EXPECT_EQ(t.encode("x<ud>y", false), (Ids{s.id(marked("_x")), s.id("<ud>"), s.id("y")}));
  EXPECT_EQ(t.encode("<ud>y", false), (Ids{s.id(marked("_")), s.id("<ud>"), s.id("y")}));
  // Control tokens only with parse_special.
  EXPECT_EQ(t.encode("<s>", false), (Ids{s.id(marked("_")), s.id("<"), s.id("s"), s.id(">")}));
  EXPECT_EQ(t.encode("<s>", false, /*parse_special=*/true), (Ids{s.id(marked("_")), 1}));
  EXPECT_EQ(t.decode(Ids{1, s.id(marked("_x")), s.id("<ud>"), 2}), "x<ud>");
}

TEST(Tokenizer, SentencePieceWithoutSpacePrefix) {
  SpmVocab s = hello_vocab();
  s.v.add_space_prefix = false;
  const Tokenizer t = Tokenizer::from_vocabulary(s.v, "test");
  EXPECT_EQ(t.encode("hello", false), (Ids{s.id("hell"), s.id("o")}));
  EXPECT_EQ(t.decode(Ids{s.id(marked("_hell"))}), " hell");  // no prefix to drop
}

// ---- GPT-2-style byte-level vocabularies ----

// GPT-2's bytes_to_unicode, written out independently of the library.
std::string byte_char(unsigned b) {
  unsigned cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    unsigned n = 0;
    for (unsigned k = 0; k < b; ++k) {
      if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174 && k <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string mapped(const std::string& text) {
  std::string out;
  for (const char c : text) out += byte_char(static_cast<unsigned char>(c));
  return out;
}

// The 256 byte characters (id = byte), then the merges' results in order.
Vocabulary bpe_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                     const std::string& pre = "gpt2") {
  Vocabulary v;
  v.kind = Vocabulary::Kind::bpe;
  v.pre = pre;
  for (unsigned b = 0; b < 256; ++b) v.tokens.push_back(byte_char(b));
  for (const auto& [a, b] : merges) {
    v.merges.push_back(mapped(a) + " " + mapped(b));
    v.tokens.push_back(mapped(a) + mapped(b));
  }
  v.tokens.emplace_back("<|endoftext|>");
  v.token_types.assign(v.tokens.size(), Vocabulary::normal);
  v.token_types.back() = Vocabulary::control;
  v.eos = static_cast<std::int64_t>(v.tokens.size()) - 1;
  v.add_bos = false;
  return v;
}

TEST(Tokenizer, Gpt2MergesByRank) {
  // ids: 256 he, 257 ll, 258 the, 259 " he", 260 " hell", 261 " hello".
  const Vocabulary v =
      bpe_vocab({{"h", "e"}, {"l", "l"}, {"t", "he"}, {" ", "he"}, {" he", "ll"}, {" hell", "o"}});
  const Tokenizer t = Tokenizer::from_vocabulary(v, "test");
  EXPECT_EQ(t.encode("the hello", false), (Ids{258, 261}));
  EXPECT_EQ(t.encode("the hello", true), (Ids{258, 261}));  // no BOS in this vocabulary
  EXPECT_EQ(t.encode("hello", false), (Ids{256, 257, 'o'}));
  EXPECT_EQ(t.decode(Ids{258, 261}), "the hello");
  EXPECT_EQ(t.piece(261), " hello");
  EXPECT_EQ(t.piece(' '), " ");
  EXPECT_EQ(t.token_text(' '), "\xC4\xA0");  // 'Ġ'
  // The control token is matched only with parse_special, and prints nothing.
  EXPECT_EQ(t.encode("<|endoftext|>", false, true), (Ids{262}));
  EXPECT_EQ(t.encode("<|endoftext|>", false).size(), 13U);
  EXPECT_EQ(t.decode(Ids{258, 262}), "the");
}

TEST(Tokenizer, Gpt2SameRankGoesLeft) {
  const Vocabulary v = bpe_vocab({{"a", "a"}});
  const Tokenizer t = Tokenizer::from_vocabulary(v, "test");
  EXPECT_EQ(t.encode("aaa", false), (Ids{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (Ids{256, 256}));
}

TEST(Tokenizer, PreTokenizersSplitBeforeMerging) {
  // A merge across the letters/digits boundary never applies: the regexes
  // split "c1" first. GPT-2 keeps a run of digits together, Llama 3 takes
  // up to three, Qwen2 one at a time.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"c", "1"}, {"1", "2"}, {"12", "3"}, {"4", "5"}};
  const Tokenizer gpt2 = Tokenizer::from_vocabulary(bpe_vocab(merges, "gpt2"), "test");
  const Tokenizer llama3 = Tokenizer::from_vocabulary(bpe_vocab(merges, "llama-bpe"), "test");
  const Tokenizer qwen2 = Tokenizer::from_vocabulary(bpe_vocab(merges, "qwen2"), "test");
  EXPECT_EQ(gpt2.encode("c12345", false), (Ids{'c', 258, 259}));
  EXPECT_EQ(llama3.encode("c12345", false), (Ids{'c', 258, 259}));
  EXPECT_EQ(llama3.encode("c1234", false), (Ids{'c', 258, '4'}));
  EXPECT_EQ(gpt2.encode("c1234", false), (Ids{'c', 258, '4'}));
  EXPECT_EQ(qwen2.encode("c12", false), (Ids{'c', '1', '2'}));
  // GPT-2 keeps "'s" apart and a space with the word after it.
  EXPECT_EQ(gpt2.encode("it's 1", false), (Ids{'i', 't', '\'', 's', ' ', '1'}));
}

TEST(Tokenizer, UnknownPreTokenizerIsRefused) {
  EXPECT_THROW(Tokenizer::from_vocabulary(bpe_vocab({}, "falcon"), "test"), Error);
}

// ---- round trips ----

const std::vector<std::string>& texts() {
  static const std::vector<std::string> all = {
      "",
      "Hello world",
      "  leading and trailing spaces  ",
      "tabs\tand\nnew\r\nlines\n\n",
      "accents: d\xC3\xA9j\xC3\xA0 vu, na\xC3\xAFve, \xC3\x85ngstr\xC3\xB6m",
      "CJK: \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
      "\xE3\x83\x88",
      "emoji: \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xE2\x9D\xA4\xEF\xB8\x8F",
      "numbers 1234567890 3.14159 -42",
      "   ",
      "\n",
      std::string("nul\0byte", 8),
  };
  return all;
}

TEST(Tokenizer, RoundTrips) {
  const Tokenizer spm = Tokenizer::from_vocabulary(hello_vocab().v, "spm");
  const Tokenizer gpt2 = Tokenizer::from_vocabulary(
      bpe_vocab({{"h", "e"}, {"l", "l"}, {" ", "w"}, {"o", "r"}}, "gpt2"), "gpt2");
  const Tokenizer qwen2 =
      Tokenizer::from_vocabulary(bpe_vocab({{"h", "e"}, {"\n", "\n"}}, "qwen2"), "qwen2");
  for (const Tokenizer* t : {&spm, &gpt2, &qwen2}) {
    for (const std::string& text : texts()) {
      EXPECT_EQ(t->decode(t->encode(text, true)), text) << text;
      std::string streamed;
      for (const std::int64_t id : t->encode(text, false)) streamed += t->piece(id);
      if (t == &spm && !text.empty()) streamed.erase(0, 1);  // the prefix space
      EXPECT_EQ(streamed, text) << text;
    }
  }
  EXPECT_TRUE(spm.encode("", false).empty());
  EXPECT_EQ(spm.encode("", true), (Ids{1}));
}

TEST(Tokenizer, MalformedUtf8IsTokenizedAsBytes) {
  const Tokenizer spm = Tokenizer::from_vocabulary(hello_vocab().v, "spm");
  const Tokenizer gpt2 = Tokenizer::from_vocabulary(bpe_vocab({{"h", "e"}}, "gpt2"), "gpt2");
  const Tokenizer llama3 = Tokenizer::from_vocabulary(bpe_vocab({}, "llama3"), "llama3");
  // A lone continuation byte, a truncated sequence, an overlong form, a
  // surrogate, bytes that never occur in UTF-8.
  const std::vector<std::string> bad = {"\x80", "he\xE6\x97", "\xC0\xAF", "\xED\xA0\x80x",
                                        "\xFF\xFE hello \xF5"};
  for (const std::string& text : bad) {
    for (const Tokenizer* t : {&spm, &gpt2, &llama3}) {
      EXPECT_EQ(t->decode(t->encode(text, false)), text);
    }
  }
  EXPECT_EQ(spm.encode("\x80", false), (Ids{hello_vocab().id(kMarker), 3 + 0x80}));
}

// ---- hostile vocabularies ----

TEST(Tokenizer, BadVocabulariesAreErrors) {
  const auto refused = [](Vocabulary v) {
    EXPECT_THROW(Tokenizer::from_vocabulary(std::move(v), "bad"), Error);
  };
  Vocabulary empty;
  refused(empty);
  {
    SpmVocab s = hello_vocab();
    s.v.scores.pop_back();  // sizes disagree
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.token_types.push_back(1);
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.token_types[5] = 9;  // no such type
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.scores[270] = std::nanf("");
    refused(s.v);
  }
  for (const std::int64_t id : {std::int64_t{-2}, std::int64_t{275}, std::int64_t{1} << 40}) {
    SpmVocab s = hello_vocab();
    s.v.bos = id;
    refused(s.v);
    SpmVocab u = hello_vocab();
    u.v.unk = id;
    refused(u.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.tokens.back() = s.v.tokens[s.v.tokens.size() - 2];  // duplicate piece
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.tokens[3] = "<0xZZ>";  // a byte token that is not one
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.tokens[4] = "<0x00>";  // the same byte twice
    refused(s.v);
  }
  {
    SpmVocab s = hello_vocab();
    s.v.tokens.back().clear();  // an empty user-defined token would match everywhere
    s.v.token_types.back() = Vocabulary::user_defined;
    refused(s.v);
  }
  {
    // An empty normal token is harmless: nothing reaches it.
    SpmVocab s = hello_vocab();
    s.v.tokens.back().clear();
    const Tokenizer t = Tokenizer::from_vocabulary(s.v, "ok");
    EXPECT_EQ(t.decode(t.encode("hello", false)), "hello");
  }
  {
    // Duplicate control tokens are harmless too (never looked up by text).
    SpmVocab s = hello_vocab();
    s.v.tokens[2] = "<s>";
    EXPECT_NO_THROW(Tokenizer::from_vocabulary(s.v, "ok"));
  }
  Vocabulary no_space = bpe_vocab({{"h", "e"}});
  no_space.merges[0] = "he";
  refused(no_space);
  Vocabulary missing = bpe_vocab({{"h", "e"}});
  missing.merges.emplace_back("x y");  // "xy" is no token
  refused(missing);
  Vocabulary unknown_part = bpe_vocab({{"h", "e"}});
  unknown_part.merges.emplace_back("zz e");
  refused(unknown_part);
}

TEST(Tokenizer, DecodeChecksIds) {
  const Tokenizer t = Tokenizer::from_vocabulary(hello_vocab().v, "spm");
  EXPECT_THROW(t.decode(Ids{-1}), Error);
  EXPECT_THROW(t.decode(Ids{4, t.vocab_size()}), Error);
  EXPECT_THROW(t.piece(std::int64_t{1} << 40), Error);
  EXPECT_THROW(t.token_text(-5), Error);
  EXPECT_THROW(t.with_special_tokens(t.vocab_size(), -1, true), Error);
  const Tokenizer other = t.with_special_tokens(2, 1, true);
  EXPECT_EQ(other.encode("", true), (Ids{2}));
  EXPECT_EQ(t.encode("", true), (Ids{1}));  // the original is unchanged
}

// ---- tokenizer.json ----

// A Llama-style tokenizer.json (SentencePiece converted to BPE with byte
// fallback), as transformers writes it.
json llama_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (unsigned b = 0; b < 256; ++b) {
    char text[8];
    std::snprintf(text, sizeof text, "<0x%02X>", b);
    vocab[text] = 3 + b;
  }
  // 259 _, 260 h, 261 e, 262 l, 263 o, 264 he, 265 ll, 266 _he, 267 _hell, 268 _hello
  int next = 259;
  for (const char* p : {"_", "h", "e", "l", "o", "he", "ll", "_he", "_hell", "_hello"}) {
    vocab[marked(p)] = next++;
  }
  const json merges = json::array(
      {json::array({"h", "e"}), json::array({"l", "l"}), json::array({marked("_"), "he"}),
       json::array({marked("_he"), "ll"}), json::array({marked("_hell"), "o"})});
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", id == 0   ? "<unk>"
                                 : id == 1 ? "<s>"
                                           : "</s>"},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Metaspace"},
        {"replacement", kMarker},
        {"prepend_scheme", "first"},
        {"split", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", kMarker}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

TEST(TokenizerJson, LlamaFamily) {
  const Tokenizer t = Tokenizer::from_hf_json(llama_json().dump(), "tokenizer.json");
  EXPECT_EQ(t.bos(), 1);  // the template's special token
  EXPECT_EQ(t.eos(), -1);
  EXPECT_EQ(t.encode("hello", true), (Ids{1, 268}));
  EXPECT_EQ(t.encode("hello hello", false), (Ids{268, 268}));
  EXPECT_EQ(t.encode("hel", false), (Ids{266, 262}));
  // Byte fallback, and Hugging Face's Metaspace: no second marker before a
  // leading space, and none after an added token.
  EXPECT_EQ(t.encode("h\xC3\xA9", false), (Ids{259, 260, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode(" he", false), (Ids{266}));
  EXPECT_EQ(t.encode("<s>he", false, true), (Ids{1, 264}));
  EXPECT_EQ(t.encode("he<s>", false, true), (Ids{266, 1}));
  EXPECT_EQ(t.encode("<s>", false), (Ids{259, 3 + '<', 3 + 's', 3 + '>'}));
  EXPECT_EQ(t.decode(Ids{1, 268, 268, 2}), "hello hello");
  EXPECT_EQ(t.decode(Ids{259, 260, 3 + 0xC3, 3 + 0xA9}), "h\xC3\xA9");
}

TEST(TokenizerJson, LegacyLlamaNormalizers) {
  // The older conversion: Prepend + Replace normalizers, no pre-tokenizer,
  // which prepends to every piece of text, after an added token too.
  json j = llama_json();
  j["pre_tokenizer"] = nullptr;
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", kMarker}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMarker}}})}};
  const Tokenizer t = Tokenizer::from_hf_json(j.dump(), "tokenizer.json");
  EXPECT_EQ(t.encode("<s>he", false, true), (Ids{1, 266}));
  EXPECT_EQ(t.encode(" he", false), (Ids{259, 266}));
}

json gpt2_json(const std::string& pre_tokenizer) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab[mapped("he")] = 256;
  vocab[mapped(" he")] = 257;
  vocab[mapped("12")] = 258;
  vocab["<|endoftext|>"] = 259;
  json pre;
  if (pre_tokenizer == "gpt2") {
    pre = {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", true}};
  } else {  // Qwen2's
    pre = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern",
                {{"Regex",
                  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", false},
               {"use_regex", false}}})}};
  }
  return {
      {"added_tokens", json::array({{{"id", 259},
                                     {"content", "<|endoftext|>"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}}})},
      {"normalizer", pre_tokenizer == "gpt2" ? json(nullptr) : json{{"type", "NFC"}}},
      {"pre_tokenizer", pre},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"h e", mapped(" ") + " he", "1 2"})}}},
  };
}

TEST(TokenizerJson, ByteLevelFamily) {
  const Tokenizer gpt2 = Tokenizer::from_hf_json(gpt2_json("gpt2").dump(), "gpt2.json");
  const Tokenizer qwen2 = Tokenizer::from_hf_json(gpt2_json("qwen2").dump(), "qwen2.json");
  EXPECT_EQ(gpt2.bos(), -1);
  EXPECT_EQ(gpt2.encode("he he12", true), (Ids{256, 257, 258}));
  EXPECT_EQ(qwen2.encode("he he12", true), (Ids{256, 257, '1', '2'}));
  // Added tokens are matched whole in both (Hugging Face's default).
  EXPECT_EQ(gpt2.encode("he<|endoftext|>", false, true), (Ids{256, 259}));
  EXPECT_EQ(gpt2.decode(Ids{256, 259, 257}), "he he");
  // Qwen2's NFC: e + U+0301 composes to é (C3 A9) before the bytes are mapped.
  EXPECT_EQ(qwen2.encode("e\xCC\x81", false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(gpt2.encode("e\xCC\x81", false), (Ids{'e', 0xCC, 0x81}));
  const Tokenizer with = gpt2.with_special_tokens(-1, 259, false);
  EXPECT_EQ(with.eos(), 259);
}

TEST(TokenizerJson, UnsupportedFieldsAreNamed) {
  const auto refused = [](const json& j, const std::string& field) {
    try {
      Tokenizer::from_hf_json(j.dump(), "tokenizer.json");
      ADD_FAILURE() << "accepted; expected a refusal naming " << field;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(field), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;  // one line
      EXPECT_LT(what.size(), 300U) << what;
    }
  };
  json j = llama_json();
  j["model"]["type"] = "WordPiece";
  refused(j, "model.type");
  j = llama_json();
  j["model"]["type"] = "Unigram";
  refused(j, "model.type");
  j = llama_json();
  j["normalizer"] = {{"type", "NFKC"}};
  refused(j, "normalizer.type");
  j = llama_json();
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
  refused(j, "normalizer.normalizers[1].type");
  j = llama_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  refused(j, "pre_tokenizer.type");
  j = llama_json();
  j["model"]["dropout"] = 0.1;
  refused(j, "model.dropout");
  j = llama_json();
  j["model"]["continuing_subword_prefix"] = "##";
  refused(j, "model.continuing_subword_prefix");
  j = llama_json();
  j["added_tokens"][1]["lstrip"] = true;
  refused(j, "added_tokens[1].lstrip");
  j = llama_json();
  j["decoder"] = nullptr;
  refused(j, "decoder");
  j = llama_json();
  j["post_processor"] = {{"type", "BertProcessing"}};
  refused(j, "post_processor.type");
  j = gpt2_json("qwen2");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  refused(j, "pre_tokenizer.pretokenizers[0].behavior");
  j = gpt2_json("qwen2");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  refused(j, "pre_tokenizer.pretokenizers[0].pattern");
  j = gpt2_json("gpt2");
  j["model"]["merges"].push_back("x");
  refused(j, "model.merges[3]");
  j = gpt2_json("gpt2");
  j["model"]["merges"].push_back("q z");  // "qz" is no token
  refused(j, "merge 3");
}

TEST(TokenizerJson, HostileFilesAreErrors) {
  const auto refused = [](const std::string& text) {
    EXPECT_THROW(Tokenizer::from_hf_json(text, "tokenizer.json"), Error) << text.substr(0, 80);
  };
  refused("");
  refused("not json");
  refused("[]");
  refused("{}");
  refused(
      R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"}})");
  refused(std::string(100000, '[') + std::string(100000, ']'));  // deep nesting
  refused(std::string("{\"model\": 1}\0garbage", 20));
  // Ids: negative, absurd (no allocation by it), with a gap, two tokens on one id.
  json j = gpt2_json("gpt2");
  j["model"]["vocab"]["zzz"] = -1;
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["vocab"]["zzz"] = std::int64_t{1} << 40;
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["vocab"]["zzz"] = 4000000;
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["vocab"]["zzz"] = 5;
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["added_tokens"][0]["content"] = "he";  // id 259 is "<|endoftext|>" in the vocabulary
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["added_tokens"][0]["content"] = "";
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["merges"] = "h e";
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["merges"][0] = json::array({"h", 3});
  refused(j.dump());
  j = gpt2_json("gpt2");
  j["model"]["vocab"] = json::array();
  refused(j.dump());
}

TEST(TokenizerJson, RunawayRegexIsAnError) {
  // Catastrophic backtracking stops at PCRE2's match limit.
  json j = gpt2_json("qwen2");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|aa)*(a|aa)*[^a]";
  const Tokenizer t = Tokenizer::from_hf_json(j.dump(), "tokenizer.json");
  EXPECT_THROW(t.encode(std::string(60, 'a'), false), Error);
  EXPECT_EQ(t.decode(t.encode("aab", false)), "aab");
}

}  // namespace
}  // namespace sinkgraph::models
