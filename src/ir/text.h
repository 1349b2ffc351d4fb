#pragma once
// Internals shared by the IR printer, parser and verifier (docs/ir.md).
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "sinkgraph/ir.h"

namespace sinkgraph::ir::text {

// Bounds that keep every size computation of the parser and the shape
// functions free of overflow: the magnitude of an expression (the sum of its
// coefficients' absolute values, an atom counting as 1) and the product of
// the magnitudes of a tensor's dims stay below kMaxMagnitude.
inline constexpr std::int64_t kMaxMagnitude = std::int64_t{1} << 40;
// Longest canonical text of one size expression.
inline constexpr std::size_t kMaxExprChars = 4096;
// Deepest nesting of floor/mod in one size expression, and the most terms a
// product of sizes may expand to (sym_numel of a shape, a view's sizes).
inline constexpr int kMaxAtomDepth = 32;
inline constexpr std::size_t kMaxProductTerms = 4096;

// Sum of |coefficient| over the terms (an atom counts as 1), saturating.
std::int64_t magnitude(const SymInt& v);
// Product of magnitudes, saturating at kMaxMagnitude + 1.
std::int64_t product_magnitude(std::span<const SymInt> dims);

// Canonical spellings.
std::string float_str(double value);                 // "1e-05", "10000.0", "inf", "nan"
std::string dims_str(std::span<const SymInt> dims);  // "[s0,64]"
std::string type_str(const TensorMeta& meta);        // "f32[s0,64]"
std::string attr_str(const Attr& value);
const char* arg_kind_name(ArgKind kind);

// Names: values and graphs [A-Za-z0-9_.]+, symbols [A-Za-z_][A-Za-z0-9_]*.
bool valid_value_name(std::string_view name);
bool valid_symbol_name(std::string_view name);

// Does `value` hold the variant alternative that `kind` needs?
bool attr_has_kind(const Attr& value, ArgKind kind);

// Symbols bound by a graph's inputs (Note [Symbols in the IR]). `fail` is
// called with the input and a message when an input dim uses an unbound symbol.
std::set<std::string> bind_input_symbols(
    const Graph& graph, const std::function<void(const Value&, const std::string&)>& fail);

// Nesting depth of floor/mod atoms (0 for a polynomial over symbols).
int atom_depth(const SymInt& v);
// Checks a list of sizes (a shape, an int list) against the bounds above;
// returns an error message or "".
std::string check_dims_bounds(std::span<const SymInt> dims);

}  // namespace sinkgraph::ir::text
