// Helpers shared by the built-in passes: aliasing, node replacement, attribute keys.
#include <bit>
#include <cstdio>
#include <sstream>

#include "passes_internal.h"

namespace sinkgraph::passes::detail {

std::vector<std::size_t> mutated_operands(const ir::Node& node) {
  const auto& args = node.op->schema.args;
  std::size_t num_tensor_args = 0;
  for (const ArgSpec& a : args) {
    if (a.kind == ArgKind::tensor) ++num_tensor_args;
  }
  // Whatever operands the plain tensor args leave belong to the (one) list.
  const std::size_t list_len =
      node.operands.size() > num_tensor_args ? node.operands.size() - num_tensor_args : 0;
  std::vector<std::size_t> out;
  std::size_t index = 0;
  for (const ArgSpec& a : args) {
    std::size_t count = 0;
    if (a.kind == ArgKind::tensor) count = 1;
    if (a.kind == ArgKind::tensor_list) count = list_len;
    for (std::size_t i = 0; i < count && index < node.operands.size(); ++i, ++index) {
      if (a.mutated || static_cast<int>(index) == node.reuse) out.push_back(index);
    }
  }
  return out;
}

const ir::Value* alias_root(const ir::Value* value) {
  while (value->producer != nullptr) {
    const int alias = value->producer->aliased_operand();
    if (alias < 0 || static_cast<std::size_t>(alias) >= value->producer->operands.size()) break;
    value = value->producer->operands[static_cast<std::size_t>(alias)];
  }
  return value;
}

std::unordered_set<const ir::Value*> mutated_roots(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> out;
  AliasRoots roots;
  for (const auto& node : graph.nodes()) {
    for (const std::size_t i : mutated_operands(*node)) out.insert(roots.find(node->operands[i]));
  }
  return out;
}

ir::Node* replace_node(ir::Graph& graph, ir::Node* old, const OpDef& op,
                       std::vector<ir::Value*> operands, std::vector<ir::NamedAttr> attrs) {
  // In place: the result keeps its name, position and uses. O(1).
  graph.rewrite(old, op, std::move(operands), std::move(attrs));
  return old;
}

std::unordered_map<const ir::Value*, int> use_counts(const ir::Graph& graph) {
  std::unordered_map<const ir::Value*, int> out;
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* o : node->operands) ++out[o];
  }
  for (const ir::Value* o : graph.outputs) ++out[o];
  return out;
}

ir::Value* Replacements::resolve(ir::Value* value) {
  // Chains are short-circuited as they are walked (a -> b -> c becomes a -> c).
  ir::Value* v = value;
  for (auto it = to_.find(v); it != to_.end(); it = to_.find(v)) v = it->second;
  for (ir::Value* p = value; p != v;) {
    ir::Value*& next = to_.at(p);
    ir::Value* after = next;
    next = v;
    p = after;
  }
  return v;
}

void Replacements::resolve_operands(ir::Node& node) {
  if (to_.empty()) return;
  for (ir::Value*& o : node.operands) o = resolve(o);
}

void Replacements::finish(ir::Graph& graph) {
  for (ir::Value*& o : graph.outputs) o = resolve(o);
  // Users first: an erased node may read another erased node's result.
  for (auto it = erased_.rbegin(); it != erased_.rend(); ++it) graph.erase(*it);
  erased_.clear();
  to_.clear();
}

const ir::Value* AliasRoots::find(const ir::Value* value) {
  // Union-find with path compression: a value's parent is the operand it
  // aliases (or itself), resolved lazily and shortened as it is walked.
  const ir::Value* v = value;
  std::vector<const ir::Value*> path;
  for (;;) {
    auto it = parent_.find(v);
    if (it == parent_.end()) {
      const ir::Value* up = v;
      if (v->producer != nullptr) {
        const int alias = v->producer->aliased_operand();
        if (alias >= 0 && static_cast<std::size_t>(alias) < v->producer->operands.size()) {
          up = v->producer->operands[static_cast<std::size_t>(alias)];
        }
      }
      it = parent_.emplace(v, up).first;
    }
    if (it->second == v) break;
    path.push_back(v);
    v = it->second;
  }
  for (const ir::Value* p : path) parent_[p] = v;
  return v;
}

void AliasRoots::alias(const ir::Value* value, const ir::Value* onto) {
  parent_[find(value)] = find(onto);
}

std::string attr_key(const ir::Attr& attr) {
  std::ostringstream out;
  out << attr.index() << ':';
  if (const auto* s = std::get_if<SymInt>(&attr)) {
    out << s->str();
  } else if (const auto* d = std::get_if<double>(&attr)) {
    out << std::hex << std::bit_cast<std::uint64_t>(*d);
  } else if (const auto* b = std::get_if<bool>(&attr)) {
    out << (*b ? 1 : 0);
  } else if (const auto* list = std::get_if<std::vector<SymInt>>(&attr)) {
    out << '[';
    for (const auto& e : *list) out << e.str() << ',';
    out << ']';
  } else {
    out << dtype_name(std::get<DType>(attr));
  }
  return out.str();
}

std::string attr_str(const ir::Attr& attr) {
  if (const auto* s = std::get_if<SymInt>(&attr)) return s->str();
  if (const auto* d = std::get_if<double>(&attr)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&attr)) return *b ? "true" : "false";
  if (const auto* list = std::get_if<std::vector<SymInt>>(&attr)) {
    std::string out = "[";
    for (std::size_t i = 0; i < list->size(); ++i) out += (i ? "," : "") + (*list)[i].str();
    return out + "]";
  }
  return std::string(dtype_name(std::get<DType>(attr)));
}

std::string type_str(const ir::Value& value) {
  if (value.is_sym) return "sym";
  return std::string(dtype_name(value.meta.dtype)) + shape_str(value.meta.shape);
}

}  // namespace sinkgraph::passes::detail
