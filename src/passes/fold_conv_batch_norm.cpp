// fold_conv_batch_norm (max-autotune): an inference batch_norm of a
// convolution becomes the convolution with rescaled weights.
//
//   c = conv2d(x, w, b, ...attrs, activation=-1)    (c read by the batch_norm only)
//   y = batch_norm(c, mean, var, weight, bias, eps)
// becomes
//   s  = mul(weight, rsqrt(add_scalar(var, eps)))   [O]
//   w' = mul(w, view(s, [O,1,1,1]))
//   b' = add(mul(sub(b, mean), s), bias)
//   y  = conv2d(x, w', b', ...attrs)
// with w, b, mean, var, weight and bias all `param` inputs (b may also be a
// `full` constant: a convolution without bias), none written in place, and x's
// storage not written in place anywhere (the convolution now runs where the
// batch_norm stood). The fused convolution can then take the activation that
// follows the batch_norm (fuse_conv_activation), so conv-bn-act, the block of
// most convolutional networks, becomes one kernel.
//
// Note [Folding a batch norm per call]
// The new nodes are ordinary IR over params, and when they run is the choice:
// - With ctx.frozen_parameter (every param with its data in ctx.param_data),
//   constant_folding, which runs right after this pass in the max-autotune
//   pipeline, evaluates them once into new params (its part (b)): the graph
//   keeps one conv2d, whatever the sizes.
// - Without it they stay in the graph and run on every call, from the params'
//   current values: a param written between calls is seen by the next one,
//   as everywhere else (folded copies would go stale: Note [Merged weights are
//   copies] in pattern_fusion.cpp). The rewrite then costs a pass over w plus
//   a few vectors of O elements, where the batch_norm it removes costs a pass
//   over c (read and written): it is made only when w has no more elements
//   than c has at batch 1 (its static dims, a symbolic one counted as 1).
//   That holds for the depthwise and early layers, where the activations are
//   large, and not for late 1x1 and 3x3 layers over small images, which keep
//   their batch_norm.
//
// Not bitwise: the folded weights round differently from normalizing the
// convolution's output (tests compare with a tolerance). y keeps its name;
// the conv's old result goes.
//
// Cost: one walk over the nodes with use counts: O(nodes + operands).
#include <algorithm>
#include <array>

#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

const OpDef& op_named(const char* name) { return OpRegistry::instance().get(name); }

bool is_activation_none(const ir::Node& conv) {
  const auto* act = std::get_if<SymInt>(conv.attr("activation"));
  return act != nullptr && act->maybe_value() == -1;
}

// The product of the static dims; a symbolic one counts as 1 (its least
// useful value: a batch of one).
std::int64_t static_numel(const ir::Value& v) {
  std::int64_t n = 1;
  for (const SymInt& d : v.meta.shape) n *= d.maybe_value().value_or(1);
  return n;
}

}  // namespace

void fold_conv_batch_norm(ir::Graph& graph, PassContext& ctx) {
  const auto mutated = detail::mutated_roots(graph);
  const auto uses = detail::use_counts(graph);
  const auto is_param = [&](const ir::Value* v) {
    return v->is_input() && !v->is_sym && v->kind == ir::InputKind::param && !mutated.contains(v);
  };
  // Constant folding can evaluate the fold once (Note [Folding a batch norm per call]).
  const auto frozen = [&](const ir::Value* v) {
    if (!ctx.frozen_parameter || !is_param(v)) return false;
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
    const std::array params{w, mean, var, weight, bias};
    if (!std::all_of(params.begin(), params.end(), is_param) || !(is_param(b) || constant_b)) {
      continue;
    }
    const bool once =
        std::all_of(params.begin(), params.end(), frozen) && (frozen(b) || constant_b);
    if (!once && static_numel(*w) > static_numel(*c)) continue;
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
