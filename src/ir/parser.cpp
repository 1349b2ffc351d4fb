// Parses the IR text form (docs/ir.md) into a Graph. Every malformed input is
// an IrError with its position; the parser is fuzzed (fuzz/parser_fuzz.cpp).
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

#include "lexer.h"
#include "sinkgraph/ir.h"
#include "text.h"

namespace sinkgraph::ir {
namespace {

using text::Tok;
using text::Token;

// Syntactic nesting (parentheses, unary minus, floor/mod); the printed form
// of an expression within kMaxAtomDepth nests at most ~4 per level, far less.
constexpr int kMaxDepth = 256;
using text::kMaxProductTerms;

struct SymRef {
  std::string name;
  SourceLoc loc;
};

// An expression with the symbols it names, checked once the scope is known.
struct ParsedExpr {
  SymInt value;
  std::vector<SymRef> refs;
  SourceLoc loc;
};

struct ParsedType {
  TensorMeta meta;
  std::vector<ParsedExpr> dims;
  SourceLoc loc;
};

struct PendingInput {
  Token name;
  bool is_sym = false;
  ParsedType type;
  InputKind kind = InputKind::input;
};

struct PositionalArg {
  bool is_list = false;
  std::vector<Value*> values;
  SourceLoc loc;
};

std::size_t num_terms(const SymInt& v) { return v.is_symbolic() ? v.expr()->terms().size() : 1; }

class Parser {
 public:
  Parser(std::string_view src, std::string file) : file_(std::move(file)), lex_(src, file_) {
    bump();
  }

  std::unique_ptr<Graph> run() {
    expect_ident("graph");
    const Token name = expect(Tok::global, "a graph name (@name)");
    graph_ = std::make_unique<Graph>(std::string(name.text));
    parse_inputs();
    expect(Tok::lbrace, "'{'");
    while (!(tok_.kind == Tok::ident && tok_.text == "return")) {
      if (tok_.kind != Tok::value) {
        fail(tok_.loc,
             "expected a node (%name = op(...)) or 'return', got " + text::describe(tok_));
      }
      parse_node();
    }
    parse_return();
    expect(Tok::rbrace, "'}'");
    if (tok_.kind != Tok::end) {
      fail(tok_.loc, "unexpected " + text::describe(tok_) +
                         " after the end of the graph (a text holds exactly one graph)");
    }
    return std::move(graph_);
  }

 private:
  [[noreturn]] void fail(SourceLoc loc, const std::string& message) const {
    throw IrError(file_, loc, message);
  }
  void bump() { tok_ = lex_.next(); }
  bool accept(Tok kind) {
    if (tok_.kind != kind) return false;
    bump();
    return true;
  }
  Token expect(Tok kind, const std::string& what) {
    if (tok_.kind != kind) fail(tok_.loc, "expected " + what + ", got " + text::describe(tok_));
    Token t = tok_;
    bump();
    return t;
  }
  void expect_ident(std::string_view word) {
    if (tok_.kind != Tok::ident || tok_.text != word) {
      fail(tok_.loc, "expected '" + std::string(word) + "', got " + text::describe(tok_));
    }
    bump();
  }

  // ---- values and scopes ----------------------------------------------------
  void define(const Token& name) {
    const auto it = defined_at_.find(std::string(name.text));
    if (it != defined_at_.end()) {
      fail(name.loc, "redefinition of %" + std::string(name.text) + " (first defined at " +
                         std::to_string(it->second.line) + ":" + std::to_string(it->second.column) +
                         ")");
    }
    defined_at_.emplace(std::string(name.text), name.loc);
  }
  Value* use(const Token& name) const {
    Value* v = graph_->find(name.text);
    if (v == nullptr) fail(name.loc, "use of undefined value %" + std::string(name.text));
    return v;
  }
  void check_bound(const std::vector<SymRef>& refs) const {
    for (const auto& r : refs) {
      if (!bound_.contains(r.name)) {
        fail(r.loc, "symbol '" + r.name + "' is not bound: declare %" + r.name +
                        ": sym or use it as an input dimension");
      }
    }
  }

  // ---- size expressions -----------------------------------------------------
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser, SourceLoc loc) : p(parser) {
      if (++p.depth_ > kMaxDepth) {
        p.fail(loc,
               "expression nested too deeply (the limit is " + std::to_string(kMaxDepth) + ")");
      }
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  void check_size(const SymInt& v, SourceLoc loc) const {
    if (text::magnitude(v) > text::kMaxMagnitude) {
      fail(loc, "size expression is too large (coefficients above 2^40)");
    }
  }

  ParsedExpr parse_expr() {
    ParsedExpr e;
    e.loc = tok_.loc;
    e.value = parse_sum(e.refs);
    if (e.value.is_symbolic() && e.value.str().size() > text::kMaxExprChars) {
      fail(e.loc, "size expression is too long");
    }
    return e;
  }

  SymInt parse_sum(std::vector<SymRef>& refs) {
    SymInt acc = parse_product(refs);
    while (tok_.kind == Tok::plus || tok_.kind == Tok::minus) {
      const Token op = tok_;
      bump();
      const SymInt rhs = parse_product(refs);
      if (text::magnitude(acc) + text::magnitude(rhs) > text::kMaxMagnitude) {
        fail(op.loc, "size expression is too large (coefficients above 2^40)");
      }
      acc = op.kind == Tok::plus ? acc + rhs : acc - rhs;
    }
    return acc;
  }

  SymInt parse_product(std::vector<SymRef>& refs) {
    SymInt acc = parse_unary(refs);
    while (tok_.kind == Tok::star) {
      const Token op = tok_;
      bump();
      const SymInt rhs = parse_unary(refs);
      const std::int64_t ma = text::magnitude(acc);
      const std::int64_t mb = text::magnitude(rhs);
      if (mb != 0 && ma > text::kMaxMagnitude / mb) {
        fail(op.loc, "size expression is too large (coefficients above 2^40)");
      }
      if (num_terms(acc) * num_terms(rhs) > kMaxProductTerms) {
        fail(op.loc, "size expression has too many terms");
      }
      acc = acc * rhs;
    }
    return acc;
  }

  SymInt parse_unary(std::vector<SymRef>& refs) {
    const DepthGuard guard(*this, tok_.loc);
    if (accept(Tok::minus)) return -parse_unary(refs);
    return parse_primary(refs);
  }

  SymInt parse_primary(std::vector<SymRef>& refs) {
    const Token t = tok_;
    if (t.kind == Tok::number) {
      bump();
      return SymInt(parse_int_literal(t));
    }
    if (accept(Tok::lparen)) {
      SymInt v = parse_sum(refs);
      expect(Tok::rparen, "')'");
      return v;
    }
    if (t.kind == Tok::ident) {
      bump();
      const bool is_floor = t.text == "floor";
      if ((is_floor || t.text == "mod") && tok_.kind == Tok::lparen) {
        bump();
        if (++atom_depth_ > text::kMaxAtomDepth) {
          fail(t.loc, "floor/mod nested too deeply (the limit is " +
                          std::to_string(text::kMaxAtomDepth) + ")");
        }
        const SymInt a = parse_sum(refs);
        expect(is_floor ? Tok::slash : Tok::comma, is_floor ? "'/'" : "','");
        const Token rhs_tok = tok_;
        const SymInt b = parse_sum(refs);
        expect(Tok::rparen, "')'");
        --atom_depth_;
        if (a.str().size() + b.str().size() > text::kMaxExprChars) {
          fail(t.loc, "size expression is too long");
        }
        if (b == SymInt(0)) fail(rhs_tok.loc, "division by zero in a size expression");
        return is_floor ? floordiv(a, b) : mod(a, b);
      }
      refs.push_back({std::string(t.text), t.loc});
      return SymInt::symbol(std::string(t.text));
    }
    fail(t.loc, "expected an integer expression, got " + text::describe(t));
  }

  std::int64_t parse_int_literal(const Token& t) const {
    if (t.text.find_first_not_of("0123456789") != std::string_view::npos) {
      fail(t.loc, "expected an integer, got '" + std::string(t.text) + "'");
    }
    std::int64_t v = 0;
    const auto res = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (res.ec != std::errc() || v > text::kMaxMagnitude) {
      fail(t.loc, "integer literal " + text::describe(t) + " is too large (the limit is 2^40)");
    }
    return v;
  }

  // ---- types ----------------------------------------------------------------
  ParsedType parse_type() {
    ParsedType ty;
    ty.loc = tok_.loc;
    const Token dt = expect(Tok::ident, "a dtype (f32, f16, bf16, i32, i64, bool)");
    const auto dtype = parse_dtype(dt.text);
    if (!dtype) fail(dt.loc, "unknown dtype " + text::describe(dt));
    ty.meta.dtype = *dtype;
    expect(Tok::lbracket, "'[' after the dtype");
    if (tok_.kind != Tok::rbracket) {
      for (;;) {
        if (ty.meta.shape.size() == kMaxDims) {
          fail(tok_.loc, "tensors have at most " + std::to_string(kMaxDims) + " dimensions");
        }
        ParsedExpr d = parse_expr();
        if (const auto c = d.value.maybe_value(); c && *c < 0) {
          fail(d.loc, "dimension " + d.value.str() + " is negative");
        }
        ty.meta.shape.push_back(d.value);
        ty.dims.push_back(std::move(d));
        if (!accept(Tok::comma)) break;
      }
    }
    expect(Tok::rbracket, "']' or ','");
    if (const std::string bad = text::check_dims_bounds(ty.meta.shape.span()); !bad.empty()) {
      fail(ty.loc, "tensor type " + text::type_str(ty.meta) + ": " + bad);
    }
    return ty;
  }

  // ---- inputs ---------------------------------------------------------------
  void parse_inputs() {
    expect(Tok::lparen, "'(' after the graph name");
    std::vector<PendingInput> pending;
    if (tok_.kind != Tok::rparen) {
      for (;;) {
        PendingInput in;
        in.name = expect(Tok::value, "an input (%name: type kind)");
        define(in.name);
        expect(Tok::colon, "':' after the input name");
        if (tok_.kind == Tok::ident && tok_.text == "sym") {
          bump();
          in.is_sym = true;
          in.kind = InputKind::sym;
          if (!text::valid_symbol_name(in.name.text)) {
            fail(in.name.loc, "sym input %" + std::string(in.name.text) +
                                  " needs a symbol name ([A-Za-z_][A-Za-z0-9_]*)");
          }
          bound_.insert(std::string(in.name.text));
        } else {
          in.type = parse_type();
          const Token kind = expect(Tok::ident, "an input kind (param, input or mutated)");
          if (!parse_input_kind(kind.text, in.kind) || in.kind == InputKind::sym) {
            fail(kind.loc, "unknown input kind " + text::describe(kind) +
                               " (expected param, input or mutated)");
          }
        }
        pending.push_back(std::move(in));
        if (!accept(Tok::comma)) break;
      }
    }
    expect(Tok::rparen, "')' or ',' in the input list");
    // Symbols bind in input order; sym inputs bind wherever they stand.
    for (const PendingInput& in : pending) {
      if (in.is_sym) continue;
      for (const ParsedExpr& d : in.type.dims) {
        const auto syms = d.value.free_symbols();
        if (syms.size() == 1 && d.value == SymInt::symbol(syms[0])) {
          bound_.insert(syms[0]);
        } else {
          check_bound(d.refs);
        }
      }
    }
    for (const PendingInput& in : pending) {
      const std::string name(in.name.text);
      Value* v =
          in.is_sym ? graph_->add_sym_input(name) : graph_->add_input(name, in.type.meta, in.kind);
      v->loc = in.name.loc;
    }
  }

  // ---- nodes ----------------------------------------------------------------
  Attr parse_attr_value(const ArgSpec& spec) {
    const Token t = tok_;
    switch (spec.kind) {
      case ArgKind::integer: {
        ParsedExpr e = parse_expr();
        check_bound(e.refs);
        return e.value;
      }
      case ArgKind::int_list: {
        expect(Tok::lbracket, "'[' to start an integer list");
        std::vector<SymInt> list;
        if (tok_.kind != Tok::rbracket) {
          for (;;) {
            ParsedExpr e = parse_expr();
            check_bound(e.refs);
            list.push_back(e.value);
            if (!accept(Tok::comma)) break;
          }
        }
        expect(Tok::rbracket, "']' or ','");
        if (const std::string bad = text::check_dims_bounds(list); !bad.empty()) {
          fail(t.loc, "integer list: " + bad);
        }
        return list;
      }
      case ArgKind::real:
        return parse_real();
      case ArgKind::boolean:
        bump();
        if (t.kind == Tok::ident && t.text == "true") return true;
        if (t.kind == Tok::ident && t.text == "false") return false;
        fail(t.loc, "expected true or false, got " + text::describe(t));
      case ArgKind::dtype: {
        bump();
        const auto d = t.kind == Tok::ident ? parse_dtype(t.text) : std::nullopt;
        if (!d) fail(t.loc, "unknown dtype " + text::describe(t));
        return *d;
      }
      case ArgKind::tensor:
      case ArgKind::tensor_list:
        break;
    }
    fail(t.loc, "attribute '" + spec.name + "' is a tensor argument");
  }

  double parse_real() {
    const bool negative = accept(Tok::minus);
    const Token t = tok_;
    bump();
    double v = 0.0;
    if (t.kind == Tok::ident && t.text == "inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (t.kind == Tok::ident && t.text == "nan" && !negative) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (t.kind == Tok::number) {
      const auto res = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      if (res.ec != std::errc() || res.ptr != t.text.data() + t.text.size()) {
        fail(t.loc, "float literal " + text::describe(t) + " is out of range");
      }
    } else {
      fail(t.loc, "expected a float (1.5, 1e-05, inf, nan), got " + text::describe(t));
    }
    return negative ? -v : v;
  }

  void parse_node() {
    std::vector<Token> results;
    for (;;) {
      const Token r = expect(Tok::value, "a result name (%name)");
      define(r);
      results.push_back(r);
      if (!accept(Tok::comma)) break;
    }
    expect(Tok::equal, "'=' after the result names");
    const Token op_tok = expect(Tok::ident, "an operator name");
    const OpDef* op = OpRegistry::instance().find(op_tok.text);
    if (op == nullptr) fail(op_tok.loc, "unknown operator " + text::describe(op_tok));
    const std::string& op_name = op->schema.name;
    expect(Tok::lparen, "'(' after the operator name");

    std::vector<PositionalArg> positional;
    std::map<std::size_t, Attr> attrs;  // by schema index
    bool seen_attr = false;
    std::optional<Token> reuse;  // Note [Placement hints] in ir.h
    std::optional<Token> placed;
    if (tok_.kind != Tok::rparen) {
      for (;;) {
        const Token t = tok_;
        if (t.kind == Tok::value || t.kind == Tok::lbracket) {
          if (seen_attr) fail(t.loc, "operand after attributes: operands come first");
          positional.push_back(parse_positional());
        } else if (t.kind == Tok::ident) {
          seen_attr = true;
          bump();
          expect(Tok::equal, "'=' after attribute name " + text::describe(t));
          std::size_t index = op->schema.args.size();
          for (std::size_t i = 0; i < op->schema.args.size(); ++i) {
            const ArgSpec& a = op->schema.args[i];
            if (a.name == t.text && a.kind != ArgKind::tensor && a.kind != ArgKind::tensor_list)
              index = i;
          }
          if (index == op->schema.args.size() && (t.text == "reuse" || t.text == "placed")) {
            std::optional<Token>& hint = t.text == "reuse" ? reuse : placed;
            if (hint) fail(t.loc, "duplicate attribute " + text::describe(t));
            hint = tok_;
            if (t.text == "reuse") {
              expect(Tok::value, "the reused operand (%name) after reuse=");
            } else {
              bump();
              if (!(hint->kind == Tok::ident && hint->text == "true")) {
                fail(hint->loc, "placed= takes only true, got " + text::describe(*hint));
              }
            }
            if (!accept(Tok::comma)) break;
            continue;
          }
          if (index == op->schema.args.size()) {
            fail(t.loc, "unknown attribute " + text::describe(t) + " for " + op_name);
          }
          if (attrs.contains(index)) fail(t.loc, "duplicate attribute " + text::describe(t));
          attrs.emplace(index, parse_attr_value(op->schema.args[index]));
        } else {
          fail(t.loc, "expected an operand or an attribute, got " + text::describe(t));
        }
        if (!accept(Tok::comma)) break;
      }
    }
    const Token close = expect(Tok::rparen, "')' or ',' in the argument list");

    std::optional<std::vector<ParsedType>> annotation;
    SourceLoc annotation_loc;
    if (accept(Tok::colon)) {
      annotation_loc = tok_.loc;
      annotation.emplace();
      if (accept(Tok::lparen)) {
        for (;;) {
          annotation->push_back(parse_type());
          if (!accept(Tok::comma)) break;
        }
        expect(Tok::rparen, "')' or ',' in the result types");
      } else {
        annotation->push_back(parse_type());
      }
      for (const ParsedType& ty : *annotation) {
        for (const ParsedExpr& d : ty.dims) check_bound(d.refs);
      }
    }

    if (results.size() != 1) {
      fail(results[1].loc, "operator " + op_name + " produces 1 result, but " +
                               std::to_string(results.size()) + " names are bound");
    }
    // Operands in schema order.
    std::vector<const ArgSpec*> tensor_specs;
    for (const ArgSpec& a : op->schema.args) {
      if (a.kind == ArgKind::tensor || a.kind == ArgKind::tensor_list) tensor_specs.push_back(&a);
    }
    if (positional.size() != tensor_specs.size()) {
      fail(op_tok.loc, op_name + " expects " + std::to_string(tensor_specs.size()) +
                           " tensor operand" + (tensor_specs.size() == 1 ? "" : "s") + ", got " +
                           std::to_string(positional.size()));
    }
    std::vector<Value*> operands;
    for (std::size_t i = 0; i < positional.size(); ++i) {
      const bool want_list = tensor_specs[i]->kind == ArgKind::tensor_list;
      if (want_list != positional[i].is_list) {
        fail(positional[i].loc, op_name + ": operand '" + tensor_specs[i]->name + "' is " +
                                    (want_list ? "a tensor list [%a, ...]" : "a single tensor"));
      }
      operands.insert(operands.end(), positional[i].values.begin(), positional[i].values.end());
    }
    std::vector<NamedAttr> named;
    for (std::size_t i = 0; i < op->schema.args.size(); ++i) {
      const ArgSpec& a = op->schema.args[i];
      if (a.kind == ArgKind::tensor || a.kind == ArgKind::tensor_list) continue;
      const auto it = attrs.find(i);
      if (it == attrs.end()) fail(close.loc, "missing attribute '" + a.name + "' of " + op_name);
      named.push_back({a.name, it->second});
    }

    Node* node = nullptr;
    try {
      node = graph_->add_node(*op, std::move(operands), std::move(named),
                              std::string(results[0].text));
    } catch (const IrError&) {
      throw;
    } catch (const Error& e) {
      fail(op_tok.loc, e.what());
    }
    node->loc = op_tok.loc;
    if (reuse) {
      const std::string name(reuse->text);
      for (std::size_t i = 0; i < node->operands.size() && node->reuse < 0; ++i) {
        if (node->operands[i]->name == name) node->reuse = static_cast<int>(i);
      }
      if (node->reuse < 0) {
        fail(reuse->loc, "reuse=%" + std::string(reuse->text) + " names no operand of this " +
                             op_name + " node");
      }
    }
    if (placed) {
      if (op_name != "cat") fail(placed->loc, "placed=true is only for cat, not " + op_name);
      node->placed = true;
    }
    Value* result = node->result();
    result->loc = results[0].loc;
    if (const std::string bad = text::check_dims_bounds(result->meta.shape.span()); !bad.empty()) {
      fail(op_tok.loc, "result %" + result->name + " of " + op_name + ": " + bad);
    }
    if (annotation) {
      if (annotation->size() != 1) {
        fail(annotation_loc, "operator " + op_name + " produces 1 result, but the annotation has " +
                                 std::to_string(annotation->size()) + " types");
      }
      const TensorMeta& want = result->meta;
      const TensorMeta& got = (*annotation)[0].meta;
      if (want.dtype != got.dtype || !(want.shape == got.shape)) {
        fail(annotation_loc, "type annotation " + text::type_str(got) +
                                 " does not match the type " + text::type_str(want) + " that " +
                                 op_name + " infers for %" + result->name);
      }
    }
  }

  PositionalArg parse_positional() {
    PositionalArg arg;
    arg.loc = tok_.loc;
    auto operand = [&] {
      const Token v = expect(Tok::value, "an operand (%name)");
      Value* value = use(v);
      if (value->is_sym) fail(v.loc, "%" + value->name + " is a sym; operands must be tensors");
      arg.values.push_back(value);
    };
    if (accept(Tok::lbracket)) {
      arg.is_list = true;
      if (tok_.kind != Tok::rbracket) {
        for (;;) {
          operand();
          if (!accept(Tok::comma)) break;
        }
      }
      expect(Tok::rbracket, "']' or ',' in the tensor list");
    } else {
      operand();
    }
    return arg;
  }

  void parse_return() {
    expect_ident("return");
    expect(Tok::lparen, "'(' after return");
    if (tok_.kind != Tok::rparen) {
      for (;;) {
        const Token v = expect(Tok::value, "an output (%name)");
        graph_->outputs.push_back(use(v));
        if (!accept(Tok::comma)) break;
      }
    }
    expect(Tok::rparen, "')' or ',' in the return list");
  }

  std::string file_;
  text::Lexer lex_;
  Token tok_;
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, SourceLoc> defined_at_;
  std::set<std::string> bound_;
  int depth_ = 0;
  int atom_depth_ = 0;
};

}  // namespace

std::unique_ptr<Graph> parse(std::string_view text, const std::string& file) {
  return Parser(text, file).run();
}

}  // namespace sinkgraph::ir
