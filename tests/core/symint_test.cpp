// SymInt: concrete arithmetic and canonical symbolic polynomials.
#include "sinkgraph/symint.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"

namespace {

// floordiv and mod are hidden friends of SymInt: found by argument-dependent
// lookup, so at least one argument is a SymInt.
using sinkgraph::SymBindings;
using sinkgraph::SymInt;

TEST(core_symint, ConcreteArithmetic) {
  const SymInt a = 7;
  const SymInt b = std::int64_t{-2};
  EXPECT_FALSE(a.is_symbolic());
  EXPECT_EQ((a + b).value(), 5);
  EXPECT_EQ((a - b).value(), 9);
  EXPECT_EQ((a * b).value(), -14);
  EXPECT_EQ((-a).value(), -7);
  EXPECT_EQ(SymInt().value(), 0);
  // Floor division and modulo round toward negative infinity.
  EXPECT_EQ(floordiv(SymInt(7), 2).value(), 3);
  EXPECT_EQ(floordiv(SymInt(-7), 2).value(), -4);
  EXPECT_EQ(floordiv(SymInt(7), -2).value(), -4);
  EXPECT_EQ(floordiv(SymInt(-8), 2).value(), -4);
  EXPECT_EQ(mod(SymInt(-7), 3).value(), 2);
  EXPECT_EQ(mod(SymInt(7), 3).value(), 1);
  EXPECT_THROW((void)floordiv(SymInt(7), 0), sinkgraph::Error);
  EXPECT_THROW((void)mod(SymInt(7), 0), sinkgraph::Error);
  EXPECT_EQ(a.maybe_value(), 7);
  EXPECT_EQ(a.str(), "7");
  EXPECT_EQ(b.str(), "-2");
  EXPECT_TRUE(a == SymInt(7));
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(a.free_symbols().empty());
  EXPECT_EQ(a.eval({}), 7);
}

TEST(core_symint, SymbolBasics) {
  const SymInt s0 = SymInt::symbol("s0");
  EXPECT_TRUE(s0.is_symbolic());
  EXPECT_EQ(s0.str(), "s0");
  EXPECT_EQ(sinkgraph::to_string(s0), "s0");
  EXPECT_FALSE(s0.maybe_value().has_value());
  EXPECT_TRUE(s0 == SymInt::symbol("s0"));
  EXPECT_FALSE(s0 == SymInt::symbol("s1"));
  EXPECT_FALSE(s0 == SymInt(5)) << "a symbol is not provably equal to a constant";
  EXPECT_THROW(SymInt::symbol(""), sinkgraph::Error);
}

TEST(core_symint, ValueOfASymbolicSizeThrows) {
  const SymInt s0 = SymInt::symbol("s0");
  try {
    (void)(2 * s0).value();
    ADD_FAILURE() << "value() of a symbolic size did not throw";
  } catch (const sinkgraph::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2*s0"), std::string::npos) << e.what();
  }
}

TEST(core_symint, CanonicalForms) {
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  EXPECT_TRUE(s0 + s0 == 2 * s0);
  EXPECT_EQ((s0 + s0).str(), "2*s0");
  EXPECT_TRUE(s0 * 2 == 2 * s0);

  const SymInt product = (s0 + 1) * (s0 - 1);
  EXPECT_EQ(product.str(), "s0*s0-1");
  EXPECT_TRUE(product == s0 * s0 - 1);
  EXPECT_TRUE(product == -1 + s0 * s0);
  EXPECT_FALSE(product == s0 * s0 + 1);

  // Commutativity and ordering: higher degree first, then by name, constant last.
  EXPECT_TRUE(s0 + s1 == s1 + s0);
  EXPECT_EQ((s1 + s0).str(), "s0+s1");
  EXPECT_TRUE(s1 * s0 == s0 * s1);
  EXPECT_EQ((s1 * s0).str(), "s0*s1");
  EXPECT_EQ((3 + 2 * s0).str(), "2*s0+3");
  EXPECT_EQ((1 - s0).str(), "-s0+1");
  EXPECT_EQ((s0 - 3 * s1).str(), "s0-3*s1");
  EXPECT_EQ((s1 + s0 * s0 * s1 - 4).str(), "s0*s0*s1+s1-4");
  EXPECT_TRUE((s0 + s1) * (s0 + s1) == s0 * s0 + 2 * s0 * s1 + s1 * s1);
  EXPECT_TRUE(s0 * (s1 + 1) - s0 == s0 * s1);

  // Identities that collapse to constants become concrete again.
  const SymInt zero = s0 - s0;
  EXPECT_FALSE(zero.is_symbolic());
  EXPECT_EQ(zero.value(), 0);
  EXPECT_FALSE((s0 * 0).is_symbolic());
  EXPECT_TRUE(s0 * 1 == s0);
  EXPECT_TRUE(s0 + 0 == s0);
  const SymInt seven = (s0 + 7) - s0;
  EXPECT_FALSE(seven.is_symbolic());
  EXPECT_EQ(seven.value(), 7);
}

TEST(core_symint, FloorDivisionAndModulo) {
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  EXPECT_TRUE(floordiv(2 * s0, 2) == s0);
  EXPECT_TRUE(floordiv(4 * s0 + 2, 2) == 2 * s0 + 1);
  EXPECT_TRUE(floordiv(s0, 1) == s0);
  EXPECT_TRUE(floordiv(s0, s0) == SymInt(1));

  // Inexact division stays an opaque atom.
  const SymInt half = floordiv(s0, 2);
  EXPECT_TRUE(half.is_symbolic());
  EXPECT_EQ(half.str(), "floor(s0/2)");
  EXPECT_FALSE(half == s0);
  EXPECT_FALSE(2 * half == s0) << "floor(s0/2)*2 is not s0 for odd s0";
  EXPECT_TRUE(half + half == 2 * floordiv(s0, 2));
  EXPECT_THROW((void)floordiv(s0, 0), sinkgraph::Error);

  const SymInt rem = mod(s0, 3);
  EXPECT_TRUE(rem.is_symbolic());
  EXPECT_EQ(rem.str(), "mod(s0,3)");
  EXPECT_TRUE(mod(s0, 1) == SymInt(0));
}

TEST(core_symint, EvalWithBindings) {
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  const SymBindings five{{"s0", 5}};
  EXPECT_EQ((s0 * s0 - 1).eval(five), 24);
  EXPECT_EQ((2 * s0 + 3).eval(five), 13);
  EXPECT_EQ((1 - s0).eval(five), -4);
  EXPECT_EQ(floordiv(s0, 2).eval({{"s0", 7}}), 3);
  EXPECT_EQ(floordiv(s0, 2).eval({{"s0", -7}}), -4);
  EXPECT_EQ(mod(s0, 3).eval({{"s0", -7}}), 2);
  EXPECT_EQ(mod(s0, 3).eval({{"s0", 8}}), 2);
  const SymBindings both{{"s0", 6}, {"s1", 4}};
  EXPECT_EQ((s0 * s1 + floordiv(s0, s1)).eval(both), 25);
  EXPECT_EQ(mod(s0 + s1, s1 - 1).eval(both), 1);
  EXPECT_THROW((void)floordiv(s0, s1).eval({{"s0", 6}, {"s1", 0}}), sinkgraph::Error);
  EXPECT_EQ(SymInt(42).eval({}), 42);
}

TEST(core_symint, EvalOfAnUnboundSymbolThrows) {
  const SymInt expr = SymInt::symbol("s0") + SymInt::symbol("pos");
  try {
    (void)expr.eval({{"s0", 3}});
    ADD_FAILURE() << "eval with an unbound symbol did not throw";
  } catch (const sinkgraph::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pos"), std::string::npos) << e.what();
  }
  // Symbols nested inside a division are checked too.
  EXPECT_THROW((void)floordiv(SymInt::symbol("s0"), SymInt::symbol("s9")).eval({{"s0", 3}}),
               sinkgraph::Error);
  EXPECT_EQ(expr.eval({{"s0", 3}, {"pos", 4}}), 7);
}

TEST(core_symint, FreeSymbols) {
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  const SymInt s2 = SymInt::symbol("s2");
  EXPECT_EQ(s0.free_symbols(), std::vector<std::string>{"s0"});
  EXPECT_EQ((s1 * s0 + floordiv(s2, s0) + 3).free_symbols(),
            (std::vector<std::string>{"s0", "s1", "s2"}));
  EXPECT_EQ(mod(s2 + 1, 4).free_symbols(), std::vector<std::string>{"s2"});
  EXPECT_TRUE((s0 - s0).free_symbols().empty());
}

}  // namespace

TEST(core_symint, floordiv_of_a_compound_operand_prints_with_parentheses) {
  const sinkgraph::SymInt s0 = sinkgraph::SymInt::symbol("s0");
  const sinkgraph::SymInt s1 = sinkgraph::SymInt::symbol("s1");
  EXPECT_EQ(sinkgraph::floordiv(s0 + 1, s1).str(), "floor((s0+1)/s1)");
  EXPECT_EQ(sinkgraph::floordiv(s0, 2).str(), "floor(s0/2)");
  EXPECT_EQ(sinkgraph::floordiv(7, 2).value(), 3);
  EXPECT_EQ(sinkgraph::mod(-7, 2).value(), 1);
}
