// fold_conv_batch_norm (max-autotune, frozen params only): an inference
// batch_norm of a convolution becomes the convolution with rescaled weights.
//
//   c = conv2d(x, w, b, ...attrs, activation=-1)    (c read by the batch_norm only)
//   y = batch_norm(c, mean, var, weight, bias, eps)
// becomes
//   s  = mul(weight, rsqrt(add_scalar(var, eps)))   [O]
//   w' = mul(w, view(s, [O,1,1,1]))
//   b' = add(mul(sub(b, mean), s), bias)
//   y  = conv2d(x, w', b', ...attrs)
// with w, b, mean, var, weight and bias all `param` inputs (b may also be a
// `full` constant: a convolution without bias), none written in place, and x's storage not written
// in place anywhere (the convolution now runs where the batch_norm stood). The new nodes are
// ordinary IR over params only, so constant_folding, which runs right after this pass in the
// max-autotune pipeline, evaluates them once into new params (its part (b)) and the graph keeps one
// conv2d. Without ctx.frozen_parameter nothing happens: the folded weights would be copies that go
// stale when a param changes (Note [Merged weights are copies] in pattern_fusion.cpp), and without
// folding the rewrite would cost more per call than the batch_norm it removes; for the same reason
// every param must have its data in ctx.param_data.
//
// Not bitwise: the folded weights round differently from normalizing the
// convolution's output (tests compare with a tolerance). y keeps its name;
// the conv's old result goes.
//
// Cost: one walk over the nodes with use counts: O(nodes + operands).
#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

const OpDef& op_named(const char* name) { return OpRegistry::instance().get(name); }

bool is_activation_none(const ir::Node& conv) {
  const auto* act = std::get_if<SymInt>(conv.attr("activation"));
  return act != nullptr && act->maybe_value() == -1;
}

}  // namespace

void fold_conv_batch_norm(ir::Graph& graph, PassContext& ctx) {
  if (!ctx.frozen_parameter) return;
  const auto mutated = detail::mutated_roots(graph);
  const auto uses = detail::use_counts(graph);
  const auto frozen = [&](const ir::Value* v) {
    if (!v->is_input() || v->is_sym || v->kind != ir::InputKind::param || mutated.contains(v)) {
      return false;
    }
    const auto it = ctx.param_data.find(v->name);
    return it != ctx.param_data.end() && it->second.defined();
  };
  std::vector<ir::Node*> norms;
  for (const auto& node : graph.nodes()) {
    if (node->op_name() == "batch_norm") norms.push_back(node.get());
  }
  for (ir::Node* bn : norms) {
    ir::Value* c = bn->operands[0];
    ir::Node* conv = c->producer;
    if (conv == nullptr || conv->op_name() != "conv2d" || conv->reuse >= 0 || bn->reuse >= 0) {
      continue;
    }
    const auto count = uses.find(c);
    if (count == uses.end() || count->second != 1 || !is_activation_none(*conv)) continue;
    // The convolution moves to where the batch_norm stands: its input must not
    // be written in place anywhere (it could be in between).
    ir::Value* x = conv->operands[0];
    if (mutated.contains(detail::alias_root(x))) continue;
    ir::Value* w = conv->operands[1];
    ir::Value* b = conv->operands[2];
    ir::Value* mean = bn->operands[1];
    ir::Value* var = bn->operands[2];
    ir::Value* weight = bn->operands[3];
    ir::Value* bias = bn->operands[4];
    // A convolution without a bias (PyTorch's bias=False, the common case
    // before a batch norm) has a `full` of zeros there: a constant too.
    const bool constant_b = b->producer != nullptr && b->producer->op_name() == "full" &&
                            !mutated.contains(detail::alias_root(b));
    if (!frozen(w) || !(frozen(b) || constant_b) || !frozen(mean) || !frozen(var) ||
        !frozen(weight) || !frozen(bias)) {
      continue;
    }
    const SymInt o = w->meta.shape[0];
    const auto add = [&](const char* op, std::vector<ir::Value*> operands,
                         std::vector<ir::NamedAttr> attrs = {}) {
      return graph.add_node(op_named(op), std::move(operands), std::move(attrs), "", conv)
          ->result();
    };
    ir::Value* shifted = add("add_scalar", {var}, {{"value", *bn->attr("eps")}});
    ir::Value* s = add("mul", {weight, add("rsqrt", {shifted})});
    ir::Value* s4 = add("view", {s}, {{"shape", std::vector<SymInt>{o, 1, 1, 1}}});
    ir::Value* w2 = add("mul", {w, s4});
    ir::Value* b2 = add("add", {add("mul", {add("sub", {b, mean}), s}), bias});
    detail::replace_node(graph, bn, op_named("conv2d"), {x, w2, b2}, conv->attrs);
    graph.erase(conv);
  }
}

}  // namespace sinkgraph::passes
