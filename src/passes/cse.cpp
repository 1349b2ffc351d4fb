// Common subexpression elimination: a node that repeats an earlier node (same
// operator, same operands, equal attributes) reuses the earlier result.
//
// Attributes compare exactly: SymInts by their canonical form, doubles by
// their bits, lists elementwise (detail::attr_key). Mutation makes a repeat
// compute something else, so the rule is deliberately simple and sound:
// nodes that write in place are never merged, and neither is a node whose
// operands or result share storage with a tensor written anywhere in the graph.
//
// Cost: one walk; replacements resolved lazily (detail::Replacements), so
// O(nodes + operands + attribute text), near-linear.
#include <algorithm>
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {

void cse(ir::Graph& graph, PassContext& /*ctx*/) {
  const auto mutated = detail::mutated_roots(graph);
  detail::AliasRoots roots;
  auto touches_mutated = [&](const ir::Node& node) {
    auto written = [&](const ir::Value* v) { return mutated.contains(roots.find(v)); };
    return std::ranges::any_of(node.operands, written) ||
           std::ranges::any_of(node.results, written);
  };

  std::unordered_map<std::string, ir::Node*> seen;
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());
  detail::Replacements replaced;
  for (ir::Node* node : nodes) {
    replaced.resolve_operands(*node);  // repeats of repeats merge too
    // Collectives stay one call each (Note [Collectives]).
    if (detail::mutates(*node) || touches_mutated(*node) ||
        (node->op != nullptr && node->op->traits.collective)) {
      continue;
    }
    std::string key = node->op_name();
    key += '(';
    for (const ir::Value* v : node->operands) key += v->name + ',';
    key += ')';
    for (const auto& a : node->attrs) key += a.name + '=' + detail::attr_key(a.value) + ';';
    const auto [it, inserted] = seen.emplace(std::move(key), node);
    if (inserted) continue;
    const ir::Node* first = it->second;
    if (first->results.size() != 1 || node->results.size() != 1) continue;
    replaced.replace(node->result(), first->result(), node);
  }
  replaced.finish(graph);
}

}  // namespace sinkgraph::passes
