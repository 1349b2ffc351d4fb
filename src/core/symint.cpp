#include "sinkgraph/symint.h"

#include <algorithm>
#include <set>
#include <utility>

#include "sinkgraph/error.h"

namespace sinkgraph {

namespace {

using Terms = SymExpr::Terms;
using Monomial = std::vector<SymExpr::AtomPtr>;

Terms terms_of(const SymInt& v) {
  if (!v.is_symbolic()) {
    Terms t;
    if (v.value() != 0) t.emplace(Monomial{}, v.value());
    return t;
  }
  return v.expr()->terms();
}

SymInt from_terms(Terms terms) {
  std::erase_if(terms, [](const auto& kv) { return kv.second == 0; });
  if (terms.empty()) return SymInt(0);
  if (terms.size() == 1 && terms.begin()->first.empty()) return SymInt(terms.begin()->second);
  return SymInt::from_expr(std::make_shared<SymExpr>(std::move(terms)));
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::string monomial_str(const Monomial& m) {
  std::string out;
  for (const auto& atom : m) {
    if (!out.empty()) out += '*';
    out += atom->key;
  }
  return out;
}

SymInt make_atom(SymExpr::Atom::Kind kind, const SymInt& a, const SymInt& b) {
  auto atom = std::make_shared<SymExpr::Atom>();
  atom->kind = kind;
  // Compound operands are parenthesized so the text reads (and parses) unambiguously.
  const auto operand = [](const SymInt& v) {
    const std::string text = v.str();
    const bool compound = text.find_first_of("+-*", text[0] == '-' ? 1 : 0) != std::string::npos;
    return compound ? "(" + text + ")" : text;
  };
  atom->key = kind == SymExpr::Atom::Kind::floordiv ? "floor(" + operand(a) + "/" + operand(b) + ")"
                                                    : "mod(" + a.str() + "," + b.str() + ")";
  auto wrap = [](const SymInt& v) {
    return v.is_symbolic() ? v.expr() : std::make_shared<SymExpr>(terms_of(v));
  };
  atom->lhs = wrap(a);
  atom->rhs = wrap(b);
  Terms t;
  t.emplace(Monomial{std::move(atom)}, 1);
  return from_terms(std::move(t));
}

}  // namespace

bool SymExpr::MonomialLess::operator()(const Monomial& a, const Monomial& b) const {
  // Higher degree first, then lexicographic by atom key; the constant sorts last.
  if (a.size() != b.size()) return a.size() > b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i]->key != b[i]->key) return a[i]->key < b[i]->key;
  }
  return false;
}

std::optional<std::int64_t> SymExpr::constant_value() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1 && terms_.begin()->first.empty()) return terms_.begin()->second;
  return std::nullopt;
}

std::int64_t SymExpr::eval(const SymBindings& bindings) const {
  std::int64_t total = 0;
  for (const auto& [mono, coeff] : terms_) {
    std::int64_t product = coeff;
    for (const auto& atom : mono) {
      std::int64_t v = 0;
      switch (atom->kind) {
        case Atom::Kind::symbol: {
          const auto it = bindings.find(atom->key);
          SG_CHECK(it != bindings.end(), "symbol '", atom->key, "' has no value bound");
          v = it->second;
          break;
        }
        case Atom::Kind::floordiv:
        case Atom::Kind::mod: {
          const std::int64_t num = atom->lhs->eval(bindings);
          const std::int64_t den = atom->rhs->eval(bindings);
          SG_CHECK(den != 0, "division by zero evaluating ", atom->key);
          const std::int64_t q = floor_div(num, den);
          v = atom->kind == Atom::Kind::floordiv ? q : num - q * den;
          break;
        }
      }
      product *= v;
    }
    total += product;
  }
  return total;
}

std::string SymExpr::str() const {
  if (terms_.empty()) return "0";
  std::string out;
  for (const auto& [mono, coeff] : terms_) {
    const bool first = out.empty();
    std::int64_t c = coeff;
    if (c < 0) {
      out += '-';
      c = -c;
    } else if (!first) {
      out += '+';
    }
    if (mono.empty()) {
      out += std::to_string(c);
    } else {
      if (c != 1) out += std::to_string(c) + "*";
      out += monomial_str(mono);
    }
  }
  return out;
}

SymInt SymInt::symbol(const std::string& name) {
  SG_CHECK(!name.empty(), "a symbol needs a name");
  auto atom = std::make_shared<SymExpr::Atom>();
  atom->kind = SymExpr::Atom::Kind::symbol;
  atom->key = name;
  Terms t;
  t.emplace(Monomial{std::move(atom)}, 1);
  return from_expr(std::make_shared<SymExpr>(std::move(t)));
}

SymInt SymInt::from_expr(std::shared_ptr<const SymExpr> expr) {
  SG_ASSERT(expr != nullptr);
  if (auto c = expr->constant_value()) return SymInt(*c);
  SymInt out;
  out.expr_ = std::move(expr);
  return out;
}

std::int64_t SymInt::value() const {
  SG_CHECK(expr_ == nullptr, "the size '", expr_ ? expr_->str() : "",
           "' is symbolic where a concrete integer is needed");
  return value_;
}

std::optional<std::int64_t> SymInt::maybe_value() const {
  if (expr_) return std::nullopt;
  return value_;
}

std::int64_t SymInt::eval(const SymBindings& bindings) const {
  return expr_ ? expr_->eval(bindings) : value_;
}

std::string SymInt::str() const { return expr_ ? expr_->str() : std::to_string(value_); }

std::vector<std::string> SymInt::free_symbols() const {
  std::set<std::string> names;
  auto visit = [&](const SymExpr& e, auto&& self) -> void {
    for (const auto& [mono, coeff] : e.terms()) {
      for (const auto& atom : mono) {
        if (atom->kind == SymExpr::Atom::Kind::symbol) {
          names.insert(atom->key);
        } else {
          self(*atom->lhs, self);
          self(*atom->rhs, self);
        }
      }
    }
  };
  if (expr_) visit(*expr_, visit);
  return {names.begin(), names.end()};
}

SymInt operator+(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.value_ + b.value_);
  Terms t = terms_of(a);
  for (const auto& [mono, coeff] : terms_of(b)) t[mono] += coeff;
  return from_terms(std::move(t));
}

SymInt operator-(const SymInt& a) {
  if (!a.is_symbolic()) return SymInt(-a.value_);
  Terms t = terms_of(a);
  for (auto& kv : t) kv.second = -kv.second;
  return from_terms(std::move(t));
}

SymInt operator-(const SymInt& a, const SymInt& b) { return a + (-b); }

SymInt operator*(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.value_ * b.value_);
  Terms out;
  for (const auto& [ma, ca] : terms_of(a)) {
    for (const auto& [mb, cb] : terms_of(b)) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end(), [](const auto& x, const auto& y) { return x->key < y->key; });
      out[m] += ca * cb;
    }
  }
  return from_terms(std::move(out));
}

SymInt floordiv(const SymInt& a, const SymInt& b) {
  if (!b.is_symbolic()) {
    SG_CHECK(b.value_ != 0, "division by zero in a size expression (", a.str(), " / 0)");
    if (!a.is_symbolic()) return SymInt(floor_div(a.value_, b.value_));
    if (b.value_ == 1) return a;
    // Exact division of every coefficient keeps the polynomial form.
    Terms t = terms_of(a);
    if (std::all_of(t.begin(), t.end(),
                    [&](const auto& kv) { return kv.second % b.value_ == 0; })) {
      for (auto& kv : t) kv.second /= b.value_;
      return from_terms(std::move(t));
    }
  }
  if (a == b) return SymInt(1);
  return make_atom(SymExpr::Atom::Kind::floordiv, a, b);
}

SymInt mod(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) {
    SG_CHECK(b.value_ != 0, "modulo by zero in a size expression");
    return SymInt(a.value_ - floor_div(a.value_, b.value_) * b.value_);
  }
  if (!b.is_symbolic() && b.value_ == 1) return SymInt(0);
  return make_atom(SymExpr::Atom::Kind::mod, a, b);
}

namespace {
thread_local bool t_strict_compare = false;
}  // namespace

bool set_strict_symbolic_compare(bool on) { return std::exchange(t_strict_compare, on); }

bool operator==(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return a.value_ == b.value_;
  const bool equal = a.is_symbolic() == b.is_symbolic() && a.str() == b.str();
  if (equal || !t_strict_compare) return equal;  // canonical: structural equality is exact
  // Note [Comparing symbolic sizes]: a constant difference decides it.
  const SymInt diff = a - b;
  if (!diff.is_symbolic()) return diff.value_ == 0;
  SG_CHECK(false, "comparing the symbolic size ", a.str(), " with ", b.str(),
           " while tracing: the answer depends on the value, and the branch it decides would be "
           "baked into the graph for every value. Make that size static (leave it out of "
           "TraceOptions::dynamic_dims), or pass the value as a plain int64 argument, which "
           "specializes and guards it");
  return false;
}

std::string to_string(const SymInt& value) { return value.str(); }

CompiledSymExpr::CompiledSymExpr(const SymInt& value, const std::vector<std::string>& symbols) {
  if (!value.is_symbolic()) {
    constant_ = value.value();
    return;
  }
  compile(*value.expr(), symbols);
}

void CompiledSymExpr::compile(const SymExpr& expr, const std::vector<std::string>& symbols) {
  for (const auto& [mono, coeff] : expr.terms()) {
    if (mono.empty()) {
      constant_ += coeff;
      continue;
    }
    Term term{coeff, {}};
    for (const auto& atom : mono) {
      if (atom->kind == SymExpr::Atom::Kind::symbol) {
        const auto it = std::find(symbols.begin(), symbols.end(), atom->key);
        SG_CHECK(it != symbols.end(), "symbol '", atom->key, "' is not bound here");
        term.factors.push_back(static_cast<int>(it - symbols.begin()));
      } else {
        auto a = std::make_shared<Atom>();
        a->floordiv = atom->kind == SymExpr::Atom::Kind::floordiv;
        a->lhs = std::make_unique<CompiledSymExpr>();
        a->rhs = std::make_unique<CompiledSymExpr>();
        a->lhs->compile(*atom->lhs, symbols);
        a->rhs->compile(*atom->rhs, symbols);
        atoms_.push_back(std::move(a));
        term.factors.push_back(~static_cast<int>(atoms_.size() - 1));
      }
    }
    terms_.push_back(std::move(term));
  }
}

std::int64_t CompiledSymExpr::eval(const std::int64_t* values) const {
  std::int64_t total = constant_;
  for (const Term& term : terms_) {
    std::int64_t product = term.coeff;
    for (const int f : term.factors) {
      if (f >= 0) {
        product *= values[f];
        continue;
      }
      const int atom_index = ~f;
      const Atom& atom = *atoms_[static_cast<std::size_t>(atom_index)];
      const std::int64_t num = atom.lhs->eval(values);
      const std::int64_t den = atom.rhs->eval(values);
      if (den == 0) return 0;  // checked when the graph was built; never divide by zero here
      const std::int64_t q = floor_div(num, den);
      product *= atom.floordiv ? q : num - q * den;
    }
    total += product;
  }
  return total;
}

}  // namespace sinkgraph
