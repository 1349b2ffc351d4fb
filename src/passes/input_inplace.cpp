// input_inplace_pass: a functional update of a mutated input followed by a
// copy back becomes one in-place write.
//
// Note [Input in-place]
//   %y = add(%x, %d) : f32[8]          # %x: f32[8] mutated
//   %x2 = copy_(%x, %y) : f32[8]
// becomes
//   %y = add(%x, %d, reuse=%x) : f32[8]
// with every use of %x2 now reading %y (which names %x's storage after the
// write, as %x2 did). It is sound when:
// - the update is elementwise (Note [In-place reuse] in inplace.cpp) with an
//   operand that is %x's memory in %x's own layout (the input, or the result
//   of in-place writes to it, never a view), of the copy's dtype and shape,
//   and no other operand shares that memory;
// - the copy writes all of %x (its destination is likewise %x's memory in its
//   own layout, and %y has its type: no broadcast, no conversion);
// - %y has no other use (nor is it an output): nothing needs the value apart
//   from its copy in %x;
// - no node between the update and the copy reads or writes %x's memory: the
//   write now happens at the update, so anything in between would see it.
// Readers after the copy read %x's memory either way.
//
// Cost: O(nodes + operands) plus, per rewritten copy, the nodes between the
// update and the copy (checked for other uses of the input): near-linear when
// each copy follows its update closely, as traced code does.
#include <algorithm>
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {

namespace {

// A name of `root`'s storage with its layout: the root itself or the result
// of in-place writes / reuse hints on such names (never a view).
bool is_plain_name_of(const ir::Value* v, const ir::Value* root) {
  while (v != root) {
    const ir::Node* p = v->producer;
    if (p == nullptr || p->op->schema.is_view || p->aliased_operand() < 0) return false;
    v = p->operands[static_cast<std::size_t>(p->aliased_operand())];
  }
  return true;
}

bool touches(const ir::Node& node, const ir::Value* root, detail::AliasRoots& roots) {
  return std::ranges::any_of(node.operands,
                             [&](const ir::Value* o) { return roots.find(o) == root; });
}

}  // namespace

void input_inplace_pass(ir::Graph& graph, PassContext& /*ctx*/) {
  std::vector<ir::Node*> nodes;
  std::unordered_map<const ir::Node*, std::size_t> index;
  for (const auto& node : graph.nodes()) {
    index[node.get()] = nodes.size();
    nodes.push_back(node.get());
  }
  detail::AliasRoots roots;
  auto uses = detail::use_counts(graph);
  detail::Replacements replaced;
  for (ir::Node* copy : nodes) {
    replaced.resolve_operands(*copy);
    if (copy->op_name() != "copy_") continue;
    ir::Value* dst = copy->operands.at(0);
    ir::Value* y = copy->operands.at(1);
    const ir::Value* root = roots.find(dst);
    if (!root->is_input() || root->kind != ir::InputKind::mutated) continue;
    if (!is_plain_name_of(dst, root)) continue;
    ir::Node* update = y->producer;
    if (update == nullptr || update->reuse >= 0 ||
        !detail::is_elementwise_in_place_safe(*update->op)) {
      continue;
    }
    // (y has one use, this copy, so no cat placed it in a slice of its own.)
    if (y->meta.dtype != dst->meta.dtype || !(y->meta.shape == dst->meta.shape)) continue;
    if (uses[y] != 1) continue;
    int k = -1;
    bool shared = false;
    for (std::size_t i = 0; i < update->operands.size(); ++i) {
      const ir::Value* o = update->operands[i];
      if (roots.find(o) != root) continue;
      if (k < 0 && is_plain_name_of(o, root)) {
        k = static_cast<int>(i);
      } else if (k < 0 || o != update->operands[static_cast<std::size_t>(k)]) {
        shared = true;
      }
    }
    if (k < 0 || shared) continue;
    bool between = false;
    for (std::size_t i = index.at(update) + 1; i < index.at(copy) && !between; ++i) {
      between = touches(*nodes[i], root, roots);
    }
    if (between) continue;
    update->reuse = k;
    roots.alias(y, root);
    // The copy's readers read y now; the copy itself goes.
    uses[y] += uses[copy->result()] - 1;
    replaced.replace(copy->result(), y, copy);
  }
  // Erase after the walk: `nodes` and `index` stay valid during it.
  replaced.finish(graph);
}

}  // namespace sinkgraph::passes
