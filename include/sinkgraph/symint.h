#pragma once
// SymInt: an integer in eager code, a symbolic expression while tracing.
//
// Note [Canonical symbolic expressions]
// A symbolic value is a polynomial with integer coefficients over atoms. An
// atom is a symbol (s0, pos) or an opaque floor division / modulo of two
// expressions. Terms are kept in a sorted map keyed by their monomial, so two
// expressions that are equal as polynomials have the same representation, the
// same printed text, and compare equal structurally. That makes "are these two
// sizes provably equal" an exact, cheap question for shape functions, and it
// gives the IR printer one canonical spelling for every expression.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sinkgraph/export.h"

namespace sinkgraph {

class SymExpr;
using SymBindings = std::unordered_map<std::string, std::int64_t>;

class SG_API SymInt {
 public:
  SymInt() = default;
  SymInt(std::int64_t value)
      : value_(value) {}                // NOLINT(google-explicit-constructor): an int is a SymInt
  SymInt(int value) : value_(value) {}  // NOLINT(google-explicit-constructor)

  static SymInt symbol(const std::string& name);
  static SymInt from_expr(std::shared_ptr<const SymExpr> expr);

  [[nodiscard]] bool is_symbolic() const { return expr_ != nullptr; }
  // The concrete value; throws sinkgraph::Error when the value is symbolic.
  [[nodiscard]] std::int64_t value() const;
  [[nodiscard]] std::optional<std::int64_t> maybe_value() const;
  [[nodiscard]] const std::shared_ptr<const SymExpr>& expr() const { return expr_; }
  // Substitutes bindings for every symbol; throws when one is unbound.
  [[nodiscard]] std::int64_t eval(const SymBindings& bindings) const;
  // Canonical text: "64", "s0", "2*s0+1", "floor(s0/2)".
  [[nodiscard]] std::string str() const;
  // Names of the symbols the value depends on, sorted.
  [[nodiscard]] std::vector<std::string> free_symbols() const;

  friend SG_API SymInt operator+(const SymInt& a, const SymInt& b);
  friend SG_API SymInt operator-(const SymInt& a, const SymInt& b);
  friend SG_API SymInt operator*(const SymInt& a, const SymInt& b);
  friend SG_API SymInt operator-(const SymInt& a);
  // Floor division and the matching non-negative-divisor modulo.
  friend SG_API SymInt floordiv(const SymInt& a, const SymInt& b);
  friend SG_API SymInt mod(const SymInt& a, const SymInt& b);
  // Structural (canonical) equality: true iff provably equal for all bindings.
  // Note [Comparing symbolic sizes]: while model code is traced, a comparison
  // whose answer depends on a symbol's value (s0 == 3) throws instead of
  // answering false, because the branch it decides would be baked into the
  // graph for every value (see set_strict_symbolic_compare()).
  friend SG_API bool operator==(const SymInt& a, const SymInt& b);

 private:
  std::int64_t value_ = 0;
  std::shared_ptr<const SymExpr> expr_;  // null: concrete value_
};

// The canonical polynomial behind a symbolic SymInt (see the Note above).
class SG_API SymExpr {
 public:
  struct Atom {
    enum class Kind : std::uint8_t { symbol, floordiv, mod };
    Kind kind = Kind::symbol;
    std::string key;  // canonical text; the sort key
    std::shared_ptr<const SymExpr> lhs, rhs;
  };
  using AtomPtr = std::shared_ptr<const Atom>;
  struct MonomialLess {
    bool operator()(const std::vector<AtomPtr>& a, const std::vector<AtomPtr>& b) const;
  };
  using Terms = std::map<std::vector<AtomPtr>, std::int64_t, MonomialLess>;

  explicit SymExpr(Terms terms) : terms_(std::move(terms)) {}
  [[nodiscard]] const Terms& terms() const { return terms_; }
  [[nodiscard]] std::optional<std::int64_t> constant_value() const;
  [[nodiscard]] std::int64_t eval(const SymBindings& bindings) const;
  [[nodiscard]] std::string str() const;

 private:
  Terms terms_;
};

// A SymInt compiled against a fixed symbol order, so that evaluating it needs
// no map lookups and no allocation (graph replay evaluates these per call).
class SG_API CompiledSymExpr {
 public:
  CompiledSymExpr() = default;
  // Throws sinkgraph::Error when `value` uses a symbol not in `symbols`.
  CompiledSymExpr(const SymInt& value, const std::vector<std::string>& symbols);
  [[nodiscard]] std::int64_t eval(const std::int64_t* values) const;

 private:
  struct Term {
    std::int64_t coeff;
    std::vector<int> factors;  // >= 0: symbol index; < 0: ~index into atoms_
  };
  struct Atom {
    bool floordiv = false;
    std::unique_ptr<CompiledSymExpr> lhs, rhs;
  };
  void compile(const SymExpr& expr, const std::vector<std::string>& symbols);
  std::int64_t constant_ = 0;
  std::vector<Term> terms_;
  std::vector<std::shared_ptr<Atom>> atoms_;
};

// Namespace-scope declarations so plain integers convert (floordiv(7, 2)).
SG_API SymInt floordiv(const SymInt& a, const SymInt& b);
SG_API SymInt mod(const SymInt& a, const SymInt& b);

SG_API std::string to_string(const SymInt& value);

// Note [Comparing symbolic sizes]: when on (the tracer turns it on around the
// traced function, and off inside shape functions, which ask "provably equal"
// on purpose), == between values whose difference is symbolic throws
// sinkgraph::Error. Per thread; returns the previous setting.
SG_API bool set_strict_symbolic_compare(bool on);

}  // namespace sinkgraph
