// Common subexpression elimination: a node that repeats an earlier node (same
// operator, same operands, equal attributes) reuses the earlier result.
//
// Attributes compare exactly: SymInts by their canonical form, doubles by
// their bits, lists elementwise (detail::attr_key). Mutation makes a repeat
// compute something else, so the rule is deliberately simple and sound:
// nodes that write in place are never merged, and neither is a node whose
// operands or result share storage with a tensor written anywhere in the graph.
#include <algorithm>
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {

void cse(ir::Graph& graph, PassContext& /*ctx*/) {
  const auto mutated = detail::mutated_roots(graph);
  auto touches_mutated = [&](const ir::Node& node) {
    auto written = [&](const ir::Value* v) { return mutated.contains(detail::alias_root(v)); };
    return std::ranges::any_of(node.operands, written) ||
           std::ranges::any_of(node.results, written);
  };

  std::unordered_map<std::string, ir::Node*> seen;
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());
  for (ir::Node* node : nodes) {
    if (detail::mutates(*node) || touches_mutated(*node)) continue;
    std::string key = node->op_name();
    key += '(';
    for (const ir::Value* v : node->operands) key += v->name + ',';
    key += ')';
    for (const auto& a : node->attrs) key += a.name + '=' + detail::attr_key(a.value) + ';';
    const auto [it, inserted] = seen.emplace(std::move(key), node);
    if (inserted) continue;
    const ir::Node* first = it->second;
    if (first->results.size() != node->results.size()) continue;
    for (std::size_t i = 0; i < node->results.size(); ++i) {
      graph.replace_all_uses(node->results[i], first->results[i]);
    }
    graph.erase(node);
  }
}

}  // namespace sinkgraph::passes
