// Checks a graph built in code or changed by a pass (docs/ir.md, "Verifier").
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "sinkgraph/ir.h"
#include "text.h"

namespace sinkgraph::ir {
namespace text {

std::int64_t magnitude(const SymInt& v) {
  if (!v.is_symbolic()) {
    const std::int64_t c = v.value();
    return c == std::numeric_limits<std::int64_t>::min() ? std::numeric_limits<std::int64_t>::max()
                                                         : (c < 0 ? -c : c);
  }
  std::int64_t total = 0;
  for (const auto& [mono, coeff] : v.expr()->terms()) {
    const std::int64_t a = coeff == std::numeric_limits<std::int64_t>::min()
                               ? std::numeric_limits<std::int64_t>::max()
                               : (coeff < 0 ? -coeff : coeff);
    if (a > kMaxMagnitude || total > kMaxMagnitude) return kMaxMagnitude + 1;
    total += a;
  }
  return total;
}

std::int64_t product_magnitude(std::span<const SymInt> dims) {
  std::int64_t total = 1;
  for (const SymInt& d : dims) {
    const std::int64_t m = magnitude(d);
    if (m == 0) return 0;
    if (m > kMaxMagnitude || total > kMaxMagnitude / m) return kMaxMagnitude + 1;
    total *= m;
  }
  return total;
}

bool valid_value_name(std::string_view name) {
  if (name.empty()) return false;
  return std::ranges::all_of(name, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
  });
}

bool valid_symbol_name(std::string_view name) {
  if (name.empty() || name.find('.') != std::string_view::npos) return false;
  return valid_value_name(name) && !(name[0] >= '0' && name[0] <= '9');
}

bool attr_has_kind(const Attr& value, ArgKind kind) {
  switch (kind) {
    case ArgKind::integer:
      return std::holds_alternative<SymInt>(value);
    case ArgKind::real:
      return std::holds_alternative<double>(value);
    case ArgKind::boolean:
      return std::holds_alternative<bool>(value);
    case ArgKind::int_list:
      return std::holds_alternative<std::vector<SymInt>>(value);
    case ArgKind::dtype:
      return std::holds_alternative<DType>(value);
    case ArgKind::tensor:
    case ArgKind::tensor_list:
      return false;
  }
  return false;
}

std::set<std::string> bind_input_symbols(
    const Graph& graph, const std::function<void(const Value&, const std::string&)>& fail) {
  std::set<std::string> bound;
  for (const Value* in : graph.inputs()) {
    if (in->is_sym) bound.insert(in->name);
  }
  for (const Value* in : graph.inputs()) {
    if (in->is_sym) continue;
    for (const SymInt& d : in->meta.shape) {
      const auto syms = d.free_symbols();
      if (syms.size() == 1 && d == SymInt::symbol(syms[0])) {
        bound.insert(syms[0]);
        continue;
      }
      for (const auto& s : syms) {
        if (!bound.contains(s)) {
          fail(*in, "dimension " + d.str() + " of %" + in->name + " uses symbol '" + s +
                        "', which no earlier input binds");
        }
      }
    }
  }
  return bound;
}

int atom_depth(const SymInt& v) {
  auto depth = [](const SymExpr& e, auto&& self) -> int {
    int best = 0;
    for (const auto& [mono, coeff] : e.terms()) {
      for (const auto& atom : mono) {
        if (atom->kind == SymExpr::Atom::Kind::symbol) continue;
        best = std::max(best, 1 + std::max(self(*atom->lhs, self), self(*atom->rhs, self)));
      }
    }
    return best;
  };
  return v.is_symbolic() ? depth(*v.expr(), depth) : 0;
}

std::string check_dims_bounds(std::span<const SymInt> dims) {
  std::size_t terms = 1;
  for (const SymInt& d : dims) {
    if (!d.is_symbolic()) continue;
    if (d.str().size() > kMaxExprChars) return "a size expression is too long";
    if (atom_depth(d) > kMaxAtomDepth) {
      return "floor/mod nested too deeply (the limit is " + std::to_string(kMaxAtomDepth) + ")";
    }
    terms *= d.expr()->terms().size();
    if (terms > kMaxProductTerms) return "the product of the sizes has too many terms";
  }
  if (product_magnitude(dims) > kMaxMagnitude) {
    return "sizes " + dims_str(dims) + " are too large (their product exceeds 2^40)";
  }
  return "";
}

}  // namespace text

namespace {

bool same_meta(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

class Verifier {
 public:
  Verifier(const Graph& graph, const std::string& file) : graph_(graph), file_(file) {}

  void run() {
    if (!text::valid_value_name(graph_.name))
      fail({}, "graph name '" + graph_.name + "' is not a valid name");
    for (const Value* in : graph_.inputs()) {
      check_name(*in, in->loc);
      if (in->is_sym && !text::valid_symbol_name(in->name)) {
        fail(in->loc, "sym input %" + in->name + " needs a symbol name ([A-Za-z_][A-Za-z0-9_]*)");
      }
      if (in->producer != nullptr) fail(in->loc, "input %" + in->name + " has a producer");
      defined_.insert(in);
    }
    bound_ = text::bind_input_symbols(
        graph_, [&](const Value& v, const std::string& msg) { fail(v.loc, msg); });
    for (const auto& node : graph_.nodes()) check_node(*node);
    for (const Value* out : graph_.outputs) {
      if (out == nullptr || !defined_.contains(out)) {
        fail({},
             "output %" + (out ? out->name : std::string("<null>")) + " is not a defined value");
      }
    }
    check_hints();
  }

 private:
  [[noreturn]] void fail(SourceLoc loc, const std::string& message) const {
    throw IrError(file_, loc, message);
  }

  void check_name(const Value& v, SourceLoc loc) {
    if (!text::valid_value_name(v.name))
      fail(loc, "value name '" + v.name + "' is not a valid IR name");
    if (!names_.insert(v.name).second) fail(loc, "%" + v.name + " is defined twice");
  }

  void check_symbols(const SymInt& v, const std::string& where, SourceLoc loc) const {
    for (const auto& s : v.free_symbols()) {
      if (!bound_.contains(s)) {
        fail(loc, std::string(where)
                      .append(" uses symbol '")
                      .append(s)
                      .append("', which no input binds"));
      }
    }
  }

  void check_node(const Node& node) {
    const SourceLoc loc = node.loc;
    const std::string who = node.results.empty() || node.results[0] == nullptr
                                ? std::string("a node")
                                : "node %" + node.results[0]->name;
    if (node.op == nullptr) fail(loc, who + " has no operator");
    const std::string op_name = node.op->schema.name;
    if (OpRegistry::instance().find(op_name) != node.op) {
      fail(loc, who + ": unknown operator '" + op_name + "'");
    }
    const std::string ctx = who + " (" + op_name + ")";
    // Arity.
    std::size_t plain = 0;
    std::size_t lists = 0;
    std::vector<const ArgSpec*> scalar_specs;
    for (const ArgSpec& a : node.op->schema.args) {
      if (a.kind == ArgKind::tensor) {
        ++plain;
      } else if (a.kind == ArgKind::tensor_list) {
        ++lists;
      } else {
        scalar_specs.push_back(&a);
      }
    }
    const bool arity_ok =
        lists == 0 ? node.operands.size() == plain : node.operands.size() >= plain;
    if (!arity_ok) {
      fail(loc, ctx + ": " + op_name + " expects " + std::to_string(plain) +
                    (lists ? " or more" : "") + " tensor operands, got " +
                    std::to_string(node.operands.size()));
    }
    for (const Value* o : node.operands) {
      if (o == nullptr || !defined_.contains(o)) {
        fail(loc, ctx + ": operand %" + (o ? o->name : std::string("<null>")) +
                      " is not defined before its use");
      }
      if (o->is_sym)
        fail(loc, ctx + ": operand %" + o->name + " is a sym; operands must be tensors");
    }
    if (node.attrs.size() != scalar_specs.size()) {
      fail(loc, ctx + ": expected " + std::to_string(scalar_specs.size()) + " attributes, got " +
                    std::to_string(node.attrs.size()));
    }
    for (std::size_t i = 0; i < scalar_specs.size(); ++i) {
      const ArgSpec& spec = *scalar_specs[i];
      const NamedAttr& a = node.attrs[i];
      if (a.name != spec.name) {
        fail(loc, ctx + ": attribute " + std::to_string(i) + " is '" + a.name + "'; expected '" +
                      spec.name + "'");
      }
      if (!text::attr_has_kind(a.value, spec.kind)) {
        fail(loc, ctx + ": attribute '" + a.name + "' must be " + text::arg_kind_name(spec.kind));
      }
      if (const auto* s = std::get_if<SymInt>(&a.value))
        check_symbols(*s, ctx + ": attribute '" + a.name + "'", loc);
      if (const auto* l = std::get_if<std::vector<SymInt>>(&a.value)) {
        for (const SymInt& s : *l) check_symbols(s, ctx + ": attribute '" + a.name + "'", loc);
      }
    }
    // Results and their meta.
    if (node.results.size() != 1) {
      fail(loc, ctx + ": operator " + op_name + " produces 1 result, but the node has " +
                    std::to_string(node.results.size()));
    }
    Value* result = node.results[0];
    if (result == nullptr) fail(loc, ctx + ": null result");
    check_name(*result, result->loc);
    if (result->producer != &node || result->is_sym) {
      fail(loc, ctx + ": result %" + result->name + " does not belong to this node");
    }
    TensorMeta inferred;
    try {
      inferred = infer_meta(node);
    } catch (const IrError&) {
      throw;
    } catch (const Error& e) {
      fail(loc, ctx + ": " + e.what());
    }
    if (!same_meta(inferred, result->meta)) {
      fail(loc, ctx + ": result has type " + text::type_str(result->meta) + " but " + op_name +
                    " infers " + text::type_str(inferred));
    }
    for (const SymInt& d : result->meta.shape) check_symbols(d, ctx + ": result type", loc);
    check_updatable(node, ctx, inferred);
    defined_.insert(result);
  }

  // An updatable attribute is patched per replay, so it must not feed the
  // result's shape: with a fresh symbol in its place, the meta must not change.
  void check_updatable(const Node& node, const std::string& ctx, const TensorMeta& inferred) const {
    std::size_t attr_index = 0;
    for (const ArgSpec& spec : node.op->schema.args) {
      if (spec.kind == ArgKind::tensor || spec.kind == ArgKind::tensor_list) continue;
      const std::size_t i = attr_index++;
      if (!spec.updatable || spec.kind != ArgKind::integer) continue;
      Node probe;
      probe.op = node.op;
      probe.operands = node.operands;
      probe.attrs = node.attrs;
      probe.attrs[i].value = SymInt::symbol("__updatable_probe");
      bool same = false;
      try {
        same = same_meta(infer_meta(probe), inferred);
      } catch (const Error&) {
        same = false;
      }
      if (!same) {
        fail(node.loc, ctx + ": attribute '" + spec.name + "' of " + node.op->schema.name +
                           " is updatable but determines the result shape");
      }
    }
  }

  // Note [Placement hints] in ir.h: each hint is sound, in O(nodes + uses).
  void check_hints() {
    constexpr auto kEnd = static_cast<std::size_t>(-1);  // graph outputs live to the end
    std::unordered_map<const Node*, std::size_t> index;
    std::unordered_map<const Value*, const Value*> root;  // storage root, where not itself
    // The contents a value names: like its root, except that a `reuse` result
    // starts new contents (what the reused operand held is dead from there on).
    std::unordered_map<const Value*, const Value*> version;
    std::unordered_map<const Value*, std::size_t> uses;
    std::unordered_map<const Value*, std::size_t> last_use;  // per version
    std::unordered_set<const Value*> strided;  // views, and results placed into a cat's slice
    auto root_of = [&](const Value* v) {
      const auto it = root.find(v);
      return it == root.end() ? v : it->second;
    };
    auto version_of = [&](const Value* v) {
      const auto it = version.find(v);
      return it == version.end() ? v : it->second;
    };
    std::size_t i = 0;
    bool any = false;
    for (const auto& node : graph_.nodes()) {
      any = any || node->reuse >= 0 || node->placed;
      index[node.get()] = i;
      for (const Value* o : node->operands) {
        ++uses[o];
        last_use[version_of(o)] = i;
      }
      const int a = node->aliased_operand();
      if (a >= 0 && static_cast<std::size_t>(a) < node->operands.size()) {
        const Value* from = node->operands[static_cast<std::size_t>(a)];
        root[node->result()] = root_of(from);
        if (node->op->schema.alias_of >= 0) version[node->result()] = version_of(from);
        if (node->op->schema.is_view || strided.contains(from)) strided.insert(node->result());
      }
      if (node->placed) {
        for (const Value* o : node->operands) strided.insert(o);
      }
      ++i;
    }
    if (!any) return;
    for (const Value* o : graph_.outputs) {
      ++uses[o];
      last_use[version_of(o)] = kEnd;
    }
    for (const auto& node : graph_.nodes()) {
      const std::string ctx = "node %" + node->result()->name + " (" + node->op_name() + ")";
      if (node->placed) {
        if (node->op_name() != "cat") fail(node->loc, ctx + ": placed=true is only for cat");
        for (const Value* o : node->operands) {
          const Node* p = o->producer;
          if (p == nullptr || p->aliased_operand() >= 0 || p->op->composite != nullptr) {
            fail(node->loc, ctx + ": placed=true, but operand %" + o->name +
                                " is not the fresh result of a kernel that could write into "
                                "its slice");
          }
          if (uses[o] != 1) {
            fail(node->loc, ctx + ": placed=true, but operand %" + o->name +
                                " is used elsewhere too (its memory is a slice of the cat)");
          }
        }
      }
      if (node->reuse < 0) continue;
      if (static_cast<std::size_t>(node->reuse) >= node->operands.size()) {
        fail(node->loc, ctx + ": reuse names operand " + std::to_string(node->reuse) + " of " +
                            std::to_string(node->operands.size()));
      }
      if (node->op->schema.alias_of >= 0 || node->op->composite != nullptr) {
        fail(node->loc, ctx + ": reuse= needs an operator with a fresh result of its own kernel");
      }
      const Value* o = node->operands[static_cast<std::size_t>(node->reuse)];
      const std::string what = ctx + ": reuse=%" + o->name;
      if (!same_meta(o->meta, node->result()->meta)) {
        fail(node->loc, what + ", but %" + o->name + " is " + text::type_str(o->meta) +
                            " and the result " + text::type_str(node->result()->meta));
      }
      if (strided.contains(o)) {
        fail(node->loc,
             what + ", but %" + o->name + " is a view (its layout may differ from the result's)");
      }
      const Value* r = root_of(o);
      if (r->is_input()) {
        if (r->kind != InputKind::mutated) {
          fail(node->loc, what + ", but its memory is graph input %" + r->name + " (" +
                              input_kind_name(r->kind) + "), which the graph may not write");
        }
      } else if (last_use[version_of(o)] != index[node.get()]) {
        fail(node->loc, what + ", but the memory of %" + o->name +
                            " is still used after this node (later, or as a graph output)");
      }
      for (const Value* other : node->operands) {
        if (other != o && root_of(other) == r) {
          fail(node->loc, what + ", but operand %" + other->name + " shares its memory");
        }
      }
    }
  }

  const Graph& graph_;
  const std::string& file_;
  std::unordered_set<const Value*> defined_;
  std::unordered_set<std::string> names_;
  std::set<std::string> bound_;
};

}  // namespace

void verify(const Graph& graph, const std::string& file) { Verifier(graph, file).run(); }

}  // namespace sinkgraph::ir
