// fuse_conv_activation (max-autotune): a unary pointwise operator applied to
// a convolution becomes the convolution's epilogue.
//
//   c = conv2d(x, w, b, ..., activation=-1)
//   y = relu(c)          (any operator whose traits are Pointwise::unary)
// becomes
//   y = conv2d(x, w, b, ..., activation=<relu's pointwise_fn>)
//
// The conv2d kernel applies the activation with the same scalar function the
// separate kernel uses (pointwise::unary), after the bias, on the f32 value
// the plain conv2d would have stored: bitwise exact. Only when the unary node
// is the single use of c: c must not be a graph output, read by anything else
// or written in place. The fused node stands where the unary one stood (y
// keeps its name and uses), so the convolution now reads x, w and b later:
// skipped when any of their storage is written in place anywhere in the graph,
// and when a placement hint (reuse) already fixed either node's memory.
//
// Runs after constant_folding (and so after fold_conv_batch_norm), before
// fuse_elementwise, which would otherwise take the activation into a fused
// elementwise program.
//
// Cost: one walk over the nodes with use counts: O(nodes + operands).
#include "passes_internal.h"

namespace sinkgraph::passes {

void fuse_conv_activation(ir::Graph& graph, PassContext& /*ctx*/) {
  const auto mutated = detail::mutated_roots(graph);
  const auto uses = detail::use_counts(graph);
  const OpDef& conv_op = OpRegistry::instance().get("conv2d");
  std::vector<ir::Node*> unaries;
  for (const auto& node : graph.nodes()) {
    if (node->op->traits.pointwise == Pointwise::unary) unaries.push_back(node.get());
  }
  for (ir::Node* u : unaries) {
    ir::Value* c = u->operands[0];
    ir::Node* conv = c->producer;
    if (conv == nullptr || conv->op != &conv_op || conv->reuse >= 0 || u->reuse >= 0) continue;
    if (u->result()->meta.dtype != c->meta.dtype) continue;
    const auto* act = std::get_if<SymInt>(conv->attr("activation"));
    if (act == nullptr || act->maybe_value() != -1) continue;
    const auto count = uses.find(c);
    if (count == uses.end() || count->second != 1 || mutated.contains(c)) continue;
    bool moved_reads_mutated = false;
    for (const ir::Value* v : conv->operands) {
      moved_reads_mutated = moved_reads_mutated || mutated.contains(detail::alias_root(v));
    }
    if (moved_reads_mutated) continue;
    std::vector<ir::NamedAttr> attrs = conv->attrs;
    for (auto& a : attrs) {
      if (a.name == "activation") a.value = SymInt(u->op->traits.pointwise_fn);
    }
    detail::replace_node(graph, u, conv_op, conv->operands, std::move(attrs));
    graph.erase(conv);
  }
}

}  // namespace sinkgraph::passes
