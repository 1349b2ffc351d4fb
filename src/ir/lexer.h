#pragma once
// Tokens of the IR text form (docs/ir.md, "Lexical structure").
#include <string>
#include <string_view>

#include "sinkgraph/ir.h"

namespace sinkgraph::ir::text {

enum class Tok : std::uint8_t {
  end,
  ident,   // graph, floor, f32, s0, true, inf, ...
  value,   // %name (text holds the name)
  global,  // @name (text holds the name)
  number,  // 42, 1.5, 1e-05 (text holds the spelling)
  lparen,
  rparen,
  lbracket,
  rbracket,
  lbrace,
  rbrace,
  comma,
  colon,
  equal,
  plus,
  minus,
  star,
  slash,
};

struct Token {
  Tok kind = Tok::end;
  std::string_view text;
  SourceLoc loc;
};

const char* tok_name(Tok kind);
// How a token reads in an error message: "'foo'", "end of input".
std::string describe(const Token& tok);

// Splits text into tokens, skipping whitespace and `#` comments. Throws
// IrError on a character that starts no token.
class Lexer {
 public:
  Lexer(std::string_view text, const std::string& file) : text_(text), file_(file) {}
  Token next();

 private:
  void skip_space();
  [[nodiscard]] char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  void advance();

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace sinkgraph::ir::text
