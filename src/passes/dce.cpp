// Dead code elimination: removes nodes whose results nobody observes.
//
// A node is live when a graph output reads one of its results, when a live
// node reads one, or when it has a side effect. In-place operators are
// side effects when they write (a view of) a graph input; one that writes a
// tensor the graph made itself matters only when something live reads that
// tensor (or any view of it), so every writer into the storage a live node or
// an output reads stays live. Graph inputs are never removed: they are the
// calling convention.
//
// Cost: O(nodes + operands), near-linear (alias roots by union-find).
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {

void dce(ir::Graph& graph, PassContext& /*ctx*/) {
  detail::AliasRoots roots;
  const auto alias_root = [&](const ir::Value* v) { return roots.find(v); };
  // Writers into each storage root, in program order.
  std::unordered_map<const ir::Value*, std::vector<ir::Node*>> writers;
  for (const auto& node : graph.nodes()) {
    for (const std::size_t i : detail::mutated_operands(*node)) {
      writers[alias_root(node->operands[i])].push_back(node.get());
    }
  }

  std::unordered_set<const ir::Node*> live;
  std::vector<ir::Node*> work;
  auto mark = [&](ir::Node* node) {
    if (node != nullptr && live.insert(node).second) work.push_back(node);
  };
  // Reading a value reads its storage: its producer and every writer into
  // that storage are needed.
  auto read = [&](const ir::Value* value) {
    mark(value->producer);
    const auto it = writers.find(alias_root(value));
    if (it == writers.end()) return;
    for (ir::Node* w : it->second) mark(w);
  };

  for (const ir::Value* out : graph.outputs) read(out);
  for (const auto& node : graph.nodes()) {
    for (const std::size_t i : detail::mutated_operands(*node)) {
      if (alias_root(node->operands[i])->is_input()) mark(node.get());
    }
  }
  while (!work.empty()) {
    ir::Node* node = work.back();
    work.pop_back();
    for (const ir::Value* operand : node->operands) read(operand);
  }

  // Erase from the back so that every dead node's users are gone first.
  std::vector<ir::Node*> dead;
  for (const auto& node : graph.nodes()) {
    if (!live.contains(node.get())) dead.push_back(node.get());
  }
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) graph.erase(*it);
}

}  // namespace sinkgraph::passes
