// Hugging Face's tokenizer.json into the tokenizer engine's tables
// (Note [One engine, three front ends] in tokenizer_impl.h).
//
// Note [What tokenizer.json we read]: the two families a Llama or Qwen2
// checkpoint ships, both model "BPE":
//   - Llama's SentencePiece conversion: byte_fallback, a Metaspace
//     pre-tokenizer (or the older Prepend + Replace normalizers), merges in
//     rank order, decoder Replace + ByteFallback + Fuse + Strip (or Metaspace);
//   - GPT-2 / Qwen2 / Llama 3: a ByteLevel pre-tokenizer, alone (GPT-2's
//     regex) or after a Split with the model's regex, an NFC normalizer
//     (Qwen2), decoder ByteLevel.
// Every other model, normalizer, pre-tokenizer, decoder or post-processor,
// and every option of these we do not implement (dropout, subword prefixes,
// lstrip/rstrip/single_word added tokens, Split behaviours other than
// "Isolated"), is refused with one line naming the field: tokenizing
// differently from the reference without saying so is the one thing a
// tokenizer must not do. truncation and padding are ignored: they never
// change the ids of one text.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "models/tokenizer_impl.h"
#include "sinkgraph/error.h"

namespace sinkgraph::models {

using namespace tokenizer_detail;  // NOLINT(google-build-using-namespace): the engine's tables
using nlohmann::json;

namespace {

constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 28;
constexpr int kMaxDepth = 64;

// Reads one tokenizer.json; every error names the file and the field.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  json parse(std::string_view text) const {
    SG_CHECK(text.size() <= kMaxJsonBytes, source_, ": ", text.size(), " bytes, more than the ",
             kMaxJsonBytes, " a tokenizer.json may have");
    SG_CHECK(text.find('\0') == std::string_view::npos, source_,
             ": holds a NUL byte, which JSON text never holds");
    const json::parser_callback_t bounded = [this](int depth, json::parse_event_t event,
                                                   json&) -> bool {
      if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
        SG_CHECK(depth < kMaxDepth, source_, ": nests deeper than ", kMaxDepth, " levels");
      }
      return true;
    };
    try {
      return json::parse(text.begin(), text.end(), bounded);
    } catch (const json::exception& e) {
      SG_CHECK(false, source_, ": malformed JSON: ", e.what());
    }
    return {};
  }

  // obj[key], or null when absent; `where` names obj ("model", "decoder.decoders[1]").
  static const json& get(const json& obj, const char* key) {
    static const json null;
    const auto it = obj.find(key);
    return it == obj.end() ? null : *it;
  }
  void expect_object(const json& v, const std::string& where) const {
    SG_CHECK(v.is_object(), source_, ": ", where, " must be an object, got ", brief(v));
  }
  std::string string(const json& obj, const char* key, const std::string& where) const {
    const json& v = get(obj, key);
    SG_CHECK(v.is_string(), source_, ": ", where, ".", key, " must be a string, got ", brief(v));
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const char* key, bool fallback, const std::string& where) const {
    const json& v = get(obj, key);
    if (v.is_null()) return fallback;
    SG_CHECK(v.is_boolean(), source_, ": ", where, ".", key, " must be true or false, got ",
             brief(v));
    return v.get<bool>();
  }
  std::int64_t integer(const json& v, const std::string& where, std::int64_t max) const {
    SG_CHECK(v.is_number_integer(), source_, ": ", where, " must be an integer, got ", brief(v));
    SG_CHECK(v.is_number_unsigned() || v.get<std::int64_t>() >= 0, source_, ": ", where,
             " must not be negative, got ", brief(v));
    const auto u = v.get<std::uint64_t>();
    SG_CHECK(u < static_cast<std::uint64_t>(max), source_, ": ", where, " is ", u,
             ", not below the bound ", max, " we accept");
    return static_cast<std::int64_t>(u);
  }
  [[noreturn]] void refuse(const std::string& where, const json& value,
                           const std::string& supported) const {
    detail::throw_error(detail::concat(source_, ": ", where, " ", brief(value),
                                       " is not supported (", supported, ")"));
  }
  // The type of a component ("NFC", "Sequence"); the component must be an object.
  std::string type(const json& v, const std::string& where) const {
    expect_object(v, where);
    return string(v, "type", where);
  }
  // A bounded description of a value for messages.
  static std::string brief(const json& v) {
    if (v.is_array()) return "an array of " + std::to_string(v.size());
    if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
    std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

// A component and its Sequence children, flattened in order.
void flatten(const Reader& r, const json& v, const std::string& where, const char* list_key,
             std::vector<std::pair<const json*, std::string>>& out) {
  if (v.is_null()) return;
  if (r.type(v, where) != "Sequence") {
    out.emplace_back(&v, where);
    return;
  }
  const json& items = Reader::get(v, list_key);
  SG_CHECK(items.is_array(), r.source(), ": ", where, ".", list_key, " must be an array, got ",
           Reader::brief(items));
  for (std::size_t i = 0; i < items.size(); ++i) {
    flatten(r, items[i], where + "." + list_key + "[" + std::to_string(i) + "]", list_key, out);
  }
}

// A Replace normalizer's or decoder's plain-string pattern.
std::string string_pattern(const Reader& r, const json& v, const std::string& where) {
  const json& pattern = Reader::get(v, "pattern");
  r.expect_object(pattern, where + ".pattern");
  if (!pattern.contains("String")) r.refuse(where + ".pattern", pattern, "only String patterns");
  std::string from = r.string(pattern, "String", where + ".pattern");
  SG_CHECK(!from.empty(), r.source(), ": ", where, ".pattern.String is empty");
  return from;
}

Prepend prepend_scheme(const Reader& r, const json& v, const std::string& where) {
  const json& scheme = Reader::get(v, "prepend_scheme");
  if (scheme.is_null()) {  // the format before prepend_scheme
    return r.boolean(v, "add_prefix_space", true, where) ? Prepend::always : Prepend::never;
  }
  const std::string s = r.string(v, "prepend_scheme", where);
  if (s == "first") return Prepend::first;
  if (s == "always") return Prepend::always;
  if (s == "never") return Prepend::never;
  r.refuse(where + ".prepend_scheme", scheme, "first, always or never");
}

void read_normalizers(const Reader& r, const json& root, Tokenizer::Impl& t) {
  std::vector<std::pair<const json*, std::string>> parts;
  flatten(r, Reader::get(root, "normalizer"), "normalizer", "normalizers", parts);
  for (const auto& [v, where] : parts) {
    const std::string type = r.type(*v, where);
    Normalizer n;
    if (type == "NFC") {
      n.kind = Normalizer::Kind::nfc;
    } else if (type == "Prepend") {
      n.kind = Normalizer::Kind::prepend;
      n.to = r.string(*v, "prepend", where);
    } else if (type == "Replace") {
      n.kind = Normalizer::Kind::replace;
      n.from = string_pattern(r, *v, where);
      n.to = r.string(*v, "content", where);
    } else {
      r.refuse(where + ".type", Reader::get(*v, "type"), "NFC, Prepend, Replace and Sequence");
    }
    t.normalizers.push_back(std::move(n));
  }
}

void read_pre_tokenizers(const Reader& r, const json& root, Tokenizer::Impl& t) {
  std::vector<std::pair<const json*, std::string>> parts;
  flatten(r, Reader::get(root, "pre_tokenizer"), "pre_tokenizer", "pretokenizers", parts);
  for (const auto& [v, where] : parts) {
    SG_CHECK(
        t.pre_tokenizers.empty() || t.pre_tokenizers.back().kind != PreTokenizer::Kind::byte_level,
        r.source(), ": ", where, " follows a ByteLevel pre-tokenizer, which must come last");
    const std::string type = r.type(*v, where);
    PreTokenizer p;
    if (type == "Metaspace") {
      p.kind = PreTokenizer::Kind::metaspace;
      p.replacement = r.string(*v, "replacement", where);
      SG_CHECK(!p.replacement.empty(), r.source(), ": ", where, ".replacement is empty");
      p.prepend = prepend_scheme(r, *v, where);
      p.split_words = r.boolean(*v, "split", true, where);
    } else if (type == "ByteLevel") {
      p.kind = PreTokenizer::Kind::byte_level;
      p.add_prefix_space = r.boolean(*v, "add_prefix_space", true, where);
      if (r.boolean(*v, "use_regex", true, where)) {
        p.regex = compile_regex(kGpt2Pattern, r.source() + ": " + where + " (GPT-2's regex)");
      }
    } else if (type == "Split") {
      p.kind = PreTokenizer::Kind::split;
      const std::string behavior = r.string(*v, "behavior", where);
      if (behavior != "Isolated")
        r.refuse(where + ".behavior", Reader::get(*v, "behavior"), "Isolated");
      if (r.boolean(*v, "invert", false, where)) r.refuse(where + ".invert", true, "false");
      const json& pattern = Reader::get(*v, "pattern");
      r.expect_object(pattern, where + ".pattern");
      const bool literal = pattern.contains("String");
      const std::string text = r.string(pattern, literal ? "String" : "Regex", where + ".pattern");
      SG_CHECK(!text.empty(), r.source(), ": ", where, ".pattern is empty");
      p.regex = compile_regex(text, r.source() + ": " + where + ".pattern", literal);
    } else {
      r.refuse(where + ".type", Reader::get(*v, "type"),
               "Metaspace, ByteLevel, Split and Sequence");
    }
    t.pre_tokenizers.push_back(std::move(p));
  }
}

void read_decoders(const Reader& r, const json& root, Tokenizer::Impl& t) {
  const json& decoder = Reader::get(root, "decoder");
  if (decoder.is_null()) r.refuse("decoder", decoder, "a ByteLevel, Metaspace or Sequence decoder");
  std::vector<std::pair<const json*, std::string>> parts;
  flatten(r, decoder, "decoder", "decoders", parts);
  for (const auto& [v, where] : parts) {
    const std::string type = r.type(*v, where);
    if (type == "ByteLevel") {
      t.decode_byte_level = true;
    } else if (type == "Metaspace") {
      t.space_marker = r.string(*v, "replacement", where);
      SG_CHECK(!t.space_marker.empty(), r.source(), ": ", where, ".replacement is empty");
      t.strip_leading_space = prepend_scheme(r, *v, where) != Prepend::never;
    } else if (type == "Replace") {
      const std::string from = string_pattern(r, *v, where);
      if (r.string(*v, "content", where) != " ") {
        r.refuse(where + ".content", Reader::get(*v, "content"), "only a space");
      }
      t.space_marker = from;
    } else if (type == "Strip") {
      const json& content = Reader::get(*v, "content");
      const json& start = Reader::get(*v, "start");
      const json& stop = Reader::get(*v, "stop");
      if (content != " ") r.refuse(where + ".content", content, "only a space");
      if (stop != 0) r.refuse(where + ".stop", stop, "only 0");
      if (start != 0 && start != 1) r.refuse(where + ".start", start, "0 or 1");
      t.strip_leading_space = start == 1;
    } else if (type != "ByteFallback" && type != "Fuse") {
      r.refuse(where + ".type", Reader::get(*v, "type"),
               "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence");
    }
  }
}

// The template's leading special token is the BOS encode(add_bos) adds.
void read_post_processor(const Reader& r, const json& root, Tokenizer::Impl& t,
                         const TextMap& all_ids) {
  std::vector<std::pair<const json*, std::string>> parts;
  flatten(r, Reader::get(root, "post_processor"), "post_processor", "processors", parts);
  for (const auto& [v, where] : parts) {
    const std::string type = r.type(*v, where);
    if (type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing") {
      r.refuse(where + ".type", Reader::get(*v, "type"),
               "ByteLevel, TemplateProcessing and Sequence");
    }
    const json& single = Reader::get(*v, "single");
    SG_CHECK(single.is_array(), r.source(), ": ", where, ".single must be an array, got ",
             Reader::brief(single));
    bool seen_text = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string item = where + ".single[" + std::to_string(i) + "]";
      r.expect_object(single[i], item);
      if (single[i].contains("Sequence")) {
        seen_text = true;
        continue;
      }
      const json& special = Reader::get(single[i], "SpecialToken");
      r.expect_object(special, item + ".SpecialToken");
      if (seen_text) r.refuse(item, single[i], "special tokens only before the text");
      SG_CHECK(t.bos < 0, r.source(), ": ", item, ": more than one special token before the text");
      const std::string name = r.string(special, "id", item + ".SpecialToken");
      // The template's special_tokens map names the ids; a name missing there
      // is looked up as a token's text.
      const json& mapped = Reader::get(Reader::get(*v, "special_tokens"), name.c_str());
      if (mapped.is_object()) {
        const json& ids = Reader::get(mapped, "ids");
        SG_CHECK(ids.is_array() && ids.size() == 1, r.source(), ": ", where, ".special_tokens: \"",
                 name.substr(0, 40), "\" must have one id");
        t.bos = r.integer(ids[0], where + ".special_tokens ids",
                          static_cast<std::int64_t>(t.tokens.size()));
      } else {
        const auto it = all_ids.find(name);
        SG_CHECK(it != all_ids.end(), r.source(), ": ", item, ": \"", name.substr(0, 40),
                 "\" is not a token");
        t.bos = it->second;
      }
      t.add_bos = true;
    }
  }
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(std::string_view tokenizer_json, const std::string& source) {
  const Reader r(source);
  const json root = r.parse(tokenizer_json);
  r.expect_object(root, "the top level");
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.source = source;
  t.merge = Impl::Merge::by_rank;

  // The model.
  const json& model = Reader::get(root, "model");
  r.expect_object(model, "model");
  const json& model_type = Reader::get(model, "type");
  if (!(model_type == "BPE" || (model_type.is_null() && model.contains("merges")))) {
    r.refuse("model.type", model_type, "only BPE");
  }
  const json& dropout = Reader::get(model, "dropout");
  if (!dropout.is_null() && dropout != 0.0) r.refuse("model.dropout", dropout, "only null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& v = Reader::get(model, key);
    const bool empty = v.is_null() || (v.is_string() && v.get_ref<const std::string&>().empty());
    if (!empty) r.refuse(std::string("model.") + key, v, "only null");
  }
  t.byte_fallback = r.boolean(model, "byte_fallback", false, "model");
  t.fuse_unk = r.boolean(model, "fuse_unk", false, "model");
  t.ignore_merges = r.boolean(model, "ignore_merges", false, "model");

  // Tokens: the vocabulary, then the added tokens (usually the same ids again).
  const json& vocab = Reader::get(model, "vocab");
  r.expect_object(vocab, "model.vocab");
  const json& added = Reader::get(root, "added_tokens");
  SG_CHECK(added.is_null() || added.is_array(), source, ": added_tokens must be an array, got ",
           Reader::brief(added));
  const std::size_t added_count = added.is_array() ? added.size() : 0;
  SG_CHECK(added_count <= kMaxAddedTokens, source, ": ", added_count,
           " added tokens, more than the ", kMaxAddedTokens, " we accept");
  // Ids are dense, so none is above the number of entries: a large id is
  // refused before anything is allocated by it.
  const auto max_tokens =
      static_cast<std::int64_t>(std::min(kMaxTokens, vocab.size() + added_count));
  std::vector<char> present;
  const auto place = [&](std::int64_t id, const std::string& text, const std::string& where) {
    if (id >= static_cast<std::int64_t>(t.tokens.size())) {
      t.tokens.resize(id + 1);
      present.resize(id + 1, 0);
    }
    if (present[id] != 0) {
      SG_CHECK(t.tokens[id] == text, source, ": ", where, " gives id ", id, " to \"",
               text.substr(0, 40), "\", which is already \"", t.tokens[id].substr(0, 40), "\"");
      return;
    }
    present[id] = 1;
    t.tokens[id] = text;
  };
  for (const auto& [text, id] : vocab.items()) {
    place(r.integer(id, "model.vocab[\"" + text.substr(0, 40) + "\"]", max_tokens), text,
          "model.vocab");
  }
  t.types.assign(t.tokens.size(), Vocabulary::normal);
  bool normalizes = false;  // filled below; the check needs the normalizers
  std::vector<std::pair<std::int32_t, bool>> added_ids;  // id, normalized
  for (std::size_t i = 0; i < added_count; ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& a = added[i];
    r.expect_object(a, where);
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (r.boolean(a, flag, false, where)) r.refuse(where + "." + flag, true, "only false");
    }
    const std::string text = r.string(a, "content", where);
    SG_CHECK(!text.empty(), source, ": ", where, ".content is empty");
    const auto id = r.integer(Reader::get(a, "id"), where + ".id", max_tokens);
    place(id, text, where);
    t.types.resize(t.tokens.size(), Vocabulary::normal);
    t.types[id] =
        r.boolean(a, "special", false, where) ? Vocabulary::control : Vocabulary::user_defined;
    added_ids.emplace_back(static_cast<std::int32_t>(id), r.boolean(a, "normalized", true, where));
    t.added.push_back({text, static_cast<std::int32_t>(id), t.types[id] == Vocabulary::control});
  }
  for (std::size_t id = 0; id < present.size(); ++id) {
    SG_CHECK(present[id] != 0, source, ": id ", id, " has no token (ids run from 0 to ",
             present.size() - 1, ")");
  }
  TextMap all_ids;  // every token's text, for the unk and template names
  all_ids.reserve(t.tokens.size());
  for (std::size_t id = 0; id < t.tokens.size(); ++id) {
    all_ids.emplace(t.tokens[id], static_cast<std::int32_t>(id));
  }
  const json& unk = Reader::get(model, "unk_token");
  if (!unk.is_null()) {
    const std::string text = r.string(model, "unk_token", "model");
    const auto it = all_ids.find(text);
    SG_CHECK(it != all_ids.end(), source, ": model.unk_token \"", text.substr(0, 40),
             "\" is not a token");
    t.unk = it->second;
    if (t.types[t.unk] == Vocabulary::normal) t.types[t.unk] = Vocabulary::unknown;
  }
  if (t.byte_fallback) {
    // Hugging Face's byte tokens are spelled format!("<{:#04X}>", byte).
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned b = 0; b < 256; ++b) {
      const std::string text{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const auto it = all_ids.find(text);
      if (it != all_ids.end() && t.types[it->second] == Vocabulary::normal) {
        t.types[it->second] = Vocabulary::byte;
      }
    }
  }

  read_normalizers(r, root, t);
  read_pre_tokenizers(r, root, t);
  read_decoders(r, root, t);
  read_post_processor(r, root, t, all_ids);
  for (const Normalizer& n : t.normalizers) normalizes |= n.kind != Normalizer::Kind::nfc;
  for (const auto& [id, normalized] : added_ids) {
    // Hugging Face matches a "normalized" added token in the normalized text;
    // we match in the raw text, which is the same under NFC alone.
    SG_CHECK(!(normalized && normalizes && t.types[id] == Vocabulary::user_defined), source,
             ": added token ", id,
             " is \"normalized\" under a Prepend or Replace normalizer, "
             "which is not supported");
  }
  t.finish();

  const json& merges = Reader::get(model, "merges");
  SG_CHECK(merges.is_null() || merges.is_array(), source, ": model.merges must be an array, got ",
           Reader::brief(merges));
  const std::size_t merge_count = merges.is_array() ? merges.size() : 0;
  SG_CHECK(merge_count <= kMaxMerges, source, ": ", merge_count, " merges, more than the ",
           kMaxMerges, " we accept");
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(merge_count);
  for (std::size_t i = 0; i < merge_count; ++i) {
    const json& m = merges[i];
    const auto bad = [&] {
      r.refuse("model.merges[" + std::to_string(i) + "]", m,
               R"("left right" or ["left", "right"])");
    };
    if (m.is_string()) {
      // Hugging Face's older form: exactly two parts around one space.
      const std::string_view s = m.get_ref<const std::string&>();
      const std::size_t space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos)
        bad();
      pairs.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pairs.emplace_back(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>());
    } else {
      bad();
    }
  }
  add_merges(t, pairs, source);
  return Tokenizer(std::move(impl));
}

}  // namespace sinkgraph::models
