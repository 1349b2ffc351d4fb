#include "lexer.h"

#include <cstdio>

namespace sinkgraph::ir::text {

namespace {
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_alpha(c) || is_digit(c) || c == '.'; }
}  // namespace

const char* tok_name(Tok kind) {
  switch (kind) {
    case Tok::end:
      return "end of input";
    case Tok::ident:
      return "a name";
    case Tok::value:
      return "a %value";
    case Tok::global:
      return "an @name";
    case Tok::number:
      return "a number";
    case Tok::lparen:
      return "'('";
    case Tok::rparen:
      return "')'";
    case Tok::lbracket:
      return "'['";
    case Tok::rbracket:
      return "']'";
    case Tok::lbrace:
      return "'{'";
    case Tok::rbrace:
      return "'}'";
    case Tok::comma:
      return "','";
    case Tok::colon:
      return "':'";
    case Tok::equal:
      return "'='";
    case Tok::plus:
      return "'+'";
    case Tok::minus:
      return "'-'";
    case Tok::star:
      return "'*'";
    case Tok::slash:
      return "'/'";
  }
  return "?";
}

std::string describe(const Token& tok) {
  if (tok.kind == Tok::end) return "end of input";
  std::string shown(tok.text.substr(0, 40));
  if (tok.kind == Tok::value) shown = "%" + shown;
  if (tok.kind == Tok::global) shown = "@" + shown;
  return "'" + shown + (tok.text.size() > 40 ? "...'" : "'");
}

void Lexer::advance() {
  if (pos_ >= text_.size()) return;
  if (text_[pos_] == '\n') {
    ++line_;
    column_ = 1;
  } else {
    ++column_;
  }
  ++pos_;
}

void Lexer::skip_space() {
  for (;;) {
    const char c = peek();
    if (pos_ >= text_.size()) return;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance();
    } else if (c == '#') {
      while (pos_ < text_.size() && peek() != '\n') advance();
    } else {
      return;
    }
  }
}

Token Lexer::next() {
  skip_space();
  Token tok;
  tok.loc = SourceLoc{line_, column_};
  if (pos_ >= text_.size()) return tok;
  const std::size_t start = pos_;
  const char c = peek();
  auto single = [&](Tok kind) {
    advance();
    tok.kind = kind;
    tok.text = text_.substr(start, 1);
    return tok;
  };
  switch (c) {
    case '(':
      return single(Tok::lparen);
    case ')':
      return single(Tok::rparen);
    case '[':
      return single(Tok::lbracket);
    case ']':
      return single(Tok::rbracket);
    case '{':
      return single(Tok::lbrace);
    case '}':
      return single(Tok::rbrace);
    case ',':
      return single(Tok::comma);
    case ':':
      return single(Tok::colon);
    case '=':
      return single(Tok::equal);
    case '+':
      return single(Tok::plus);
    case '-':
      return single(Tok::minus);
    case '*':
      return single(Tok::star);
    case '/':
      return single(Tok::slash);
    default:
      break;
  }
  if (c == '%' || c == '@') {
    advance();
    const std::size_t name_start = pos_;
    while (pos_ < text_.size() && is_name_char(peek())) advance();
    if (pos_ == name_start) {
      throw IrError(file_, tok.loc, std::string("expected a name after '") + c + "'");
    }
    tok.kind = c == '%' ? Tok::value : Tok::global;
    tok.text = text_.substr(name_start, pos_ - name_start);
    return tok;
  }
  if (is_alpha(c)) {
    while (pos_ < text_.size() && (is_alpha(peek()) || is_digit(peek()))) advance();
    tok.kind = Tok::ident;
    tok.text = text_.substr(start, pos_ - start);
    return tok;
  }
  if (is_digit(c)) {
    while (is_digit(peek())) advance();
    if (peek() == '.') {
      advance();
      while (is_digit(peek())) advance();
    }
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
      advance();
      if (peek() == '+' || peek() == '-') advance();
      while (is_digit(peek())) advance();
    }
    tok.kind = Tok::number;
    tok.text = text_.substr(start, pos_ - start);
    return tok;
  }
  char shown[32];
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f) {
    std::snprintf(shown, sizeof(shown), "'%c'", c);
  } else {
    std::snprintf(shown, sizeof(shown), "byte 0x%02x", byte);
  }
  throw IrError(file_, tok.loc, std::string("unexpected character ") + shown);
}

}  // namespace sinkgraph::ir::text
