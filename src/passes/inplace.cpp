// inplace_pass: an elementwise operator writes its result over an input that
// dies at that node, instead of into fresh memory.
//
// Note [In-place reuse]
// `%b = silu(%a)` may write %b into %a's memory (`reuse=%a`, Note [Placement
// hints] in ir.h) when that is invisible to everything else:
// - the operator is elementwise (is_elementwise_in_place_safe): its kernel
//   reads input element i only to write output element i, so overwriting
//   element i after reading it changes no later read;
// - %a has the result's dtype and shape (no broadcast) and its layout: %a is
//   not a view, nor a slice a cat placed it in, and its storage root is a
//   fresh node result, hence contiguous;
// - nothing reads that memory after the node: no later node uses %a or any
//   value sharing its storage (views, in-place results), and none of them is
//   a graph output. Graph inputs are never reused here (params and user
//   inputs belong to the caller; mutated inputs are input_inplace_pass's);
// - no other operand of the node shares %a's memory (add(%a, transpose(%a))
//   would read elements already overwritten).
// %b then names %a's storage after the write, exactly like an in-place
// operator's result, so alias_root() and the later passes see the sharing.
//
// Cost: O(nodes + operands), near-linear (alias roots by union-find).
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {

namespace detail {
bool is_elementwise_in_place_safe(const OpDef& op) {
  return op.traits.pointwise != Pointwise::none && op.schema.alias_of < 0 &&
         op.composite == nullptr;
}
}  // namespace detail

namespace {

// Values whose memory is not laid out like a fresh tensor of their type.
std::unordered_set<const ir::Value*> strided_values(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> out;
  for (const auto& node : graph.nodes()) {
    const int a = node->aliased_operand();
    if (a >= 0) {
      const ir::Value* from = node->operands[static_cast<std::size_t>(a)];
      if (node->op->schema.is_view || out.contains(from)) out.insert(node->result());
    }
    if (node->placed) {
      for (const ir::Value* o : node->operands) out.insert(o);
    }
  }
  return out;
}

}  // namespace

void inplace_pass(ir::Graph& graph, PassContext& /*ctx*/) {
  detail::AliasRoots roots;
  const auto alias_root = [&](const ir::Value* v) { return roots.find(v); };
  // Last node index reading each storage root (outputs: past the end).
  std::unordered_map<const ir::Value*, std::size_t> last_use;
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* o : node->operands) last_use[alias_root(o)] = nodes.size();
    nodes.push_back(node.get());
  }
  for (const ir::Value* o : graph.outputs) last_use[alias_root(o)] = nodes.size();
  const auto strided = strided_values(graph);

  for (std::size_t i = 0; i < nodes.size(); ++i) {
    ir::Node* node = nodes[i];
    if (node->reuse >= 0 || !detail::is_elementwise_in_place_safe(*node->op)) continue;
    if (strided.contains(node->result())) continue;  // placed into a cat's slice already
    const TensorMeta& out = node->result()->meta;
    for (std::size_t k = 0; k < node->operands.size(); ++k) {
      const ir::Value* a = node->operands[k];
      const ir::Value* root = alias_root(a);
      if (root->is_input() || strided.contains(a)) continue;
      if (a->meta.dtype != out.dtype || !(a->meta.shape == out.shape)) continue;
      if (last_use.at(root) != i) continue;  // read later, or a graph output
      bool shared = false;
      for (const ir::Value* other : node->operands) {
        shared = shared || (other != a && alias_root(other) == root);
      }
      if (shared) continue;
      node->reuse = static_cast<int>(k);
      // The result now shares `root`'s storage: its readers are the root's.
      const auto it = last_use.find(node->result());
      last_use[root] = it == last_use.end() ? i : it->second;
      roots.alias(node->result(), root);
      break;
    }
  }
}

}  // namespace sinkgraph::passes
