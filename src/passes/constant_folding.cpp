// Constant folding.
//
// (a) Literal constants. An elementwise node whose tensor operands are all
//     `full` results becomes one `full` of its (possibly symbolic) inferred
//     shape. The value comes from running the real operator eagerly on
//     1-element tensors, so it matches the kernels bitwise. Folds that would
//     produce a non-finite value are left alone (a NaN's payload could differ
//     from the kernel's).
// (b) Frozen parameters (ctx.frozen_parameter only). Subgraphs that read only
//     `param` inputs (and constants) are computed now from ctx.param_data, and
//     each value such a subgraph hands to the rest of the graph becomes a NEW
//     `param` input ("folded0", "folded1", ...) whose data this pass stores in
//     ctx.param_data under that name. The compiler must pass those new params'
//     data (from ctx.param_data) when it calls the graph. Without
//     frozen_parameter, params are never folded: their data may change.
//
// Values that share storage with a tensor written in place are never treated
// as constants, and a graph output (or its storage) is never replaced by a
// folded param: the caller would receive the param's own memory.
//
// Cost: O(nodes + operands) plus the folded kernels themselves, near-linear.
#include <cmath>
#include <unordered_map>

#include "passes_internal.h"
#include "sinkgraph/ops.h"

namespace sinkgraph::passes {
namespace {

// Pointwise operators (Note [Operator traits]): one element of each operand
// determines one element of the result.
bool is_foldable_op(const OpDef& op) { return op.traits.pointwise != Pointwise::none; }

double full_value(const ir::Node& full) { return std::get<double>(*full.attr("value")); }

// (a): fold elementwise nodes over `full` constants.
void fold_literals(ir::Graph& graph, const std::unordered_set<const ir::Value*>& mutated) {
  const OpDef& full_op = OpRegistry::instance().get("full");
  auto is_constant = [&](const ir::Value* v) {
    return v->producer != nullptr && v->producer->op == &full_op && !mutated.contains(v);
  };
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());
  for (ir::Node* node : nodes) {
    if (!is_foldable_op(*node->op) || node->results.size() != 1) continue;
    bool all_constant = !node->operands.empty();
    for (const ir::Value* v : node->operands) all_constant = all_constant && is_constant(v);
    if (!all_constant) continue;
    // One element of each operand, made by the real `full` operator.
    std::vector<Tensor> elements;
    for (const ir::Value* v : node->operands) {
      elements.push_back(ops::full(SymShape{1}, full_value(*v->producer), v->meta.dtype));
    }
    std::vector<const Tensor*> ptrs;
    ptrs.reserve(elements.size());
    for (const Tensor& t : elements) ptrs.push_back(&t);
    const Tensor out = run_op(*node->op, ptrs, node->scalar_args());
    const DType dtype = node->result()->meta.dtype;
    const double value = is_integral(dtype) ? static_cast<double>(out.to_ints().at(0))
                                            : static_cast<double>(out.to_floats().at(0));
    if (!std::isfinite(value)) continue;
    const auto& shape = node->result()->meta.shape;
    std::vector<ir::NamedAttr> attrs = {{"shape", std::vector<SymInt>(shape.begin(), shape.end())},
                                        {"value", value},
                                        {"dtype", dtype}};
    detail::replace_node(graph, node, full_op, {}, std::move(attrs));
  }
}

bool concrete_attrs(const ir::Node& node) {
  for (const auto& a : node.attrs) {
    if (const auto* s = std::get_if<SymInt>(&a.value); s && s->is_symbolic()) return false;
    if (const auto* l = std::get_if<std::vector<SymInt>>(&a.value)) {
      for (const auto& d : *l) {
        if (d.is_symbolic()) return false;
      }
    }
  }
  return true;
}

std::string fresh_param_name(const ir::Graph& graph, const PassContext& ctx) {
  for (int i = 0;; ++i) {
    std::string name = "folded" + std::to_string(i);
    if (graph.find(name) == nullptr && !ctx.param_data.contains(name)) return name;
  }
}

// (b): compute subgraphs over frozen params now; their boundary values become params.
void fold_params(ir::Graph& graph, PassContext& ctx,
                 const std::unordered_set<const ir::Value*>& mutated) {
  // Runtime data of every value computable now, and whether it depends on a param.
  std::unordered_map<const ir::Value*, Tensor> data;
  std::unordered_set<const ir::Value*> from_param;
  for (const ir::Value* in : graph.inputs()) {
    if (in->is_sym || in->kind != ir::InputKind::param || mutated.contains(in)) continue;
    const auto it = ctx.param_data.find(in->name);
    if (it == ctx.param_data.end() || !it->second.defined()) continue;
    data[in] = it->second;
    from_param.insert(in);
  }
  if (data.empty()) return;
  // Storage a graph output shows stays computed per call: an output must not
  // become (a view of) a folded param, which the caller does not own.
  std::unordered_set<const ir::Value*> output_roots;
  detail::AliasRoots roots;
  for (const ir::Value* o : graph.outputs) output_roots.insert(roots.find(o));
  std::vector<ir::Node*> evaluated;  // param-dependent, in program order
  std::vector<ir::Node*> constants;  // `full` nodes evaluated along the way
  for (const auto& node : graph.nodes()) {
    if (node->results.size() != 1 || detail::mutates(*node) || !concrete_attrs(*node)) continue;
    const ir::Value* root = roots.find(node->result());
    if (mutated.contains(root) || output_roots.contains(root)) continue;
    if (node->operands.empty() && node->op_name() != "full") continue;  // e.g. arange: leave it
    bool ready = true;
    bool param_dep = false;
    std::vector<const Tensor*> ptrs;
    for (const ir::Value* v : node->operands) {
      const auto it = data.find(v);
      if (it == data.end()) {
        ready = false;
        break;
      }
      ptrs.push_back(&it->second);
      param_dep = param_dep || from_param.contains(v);
    }
    if (!ready) continue;
    bool concrete_shape = true;
    for (const auto& d : node->result()->meta.shape)
      concrete_shape = concrete_shape && !d.is_symbolic();
    if (!concrete_shape) continue;
    data[node->result()] = run_op(*node->op, ptrs, node->scalar_args());
    if (param_dep) {
      from_param.insert(node->result());
      evaluated.push_back(node.get());
    } else {
      constants.push_back(node.get());
    }
  }
  if (evaluated.empty()) return;

  // A value is needed outside when an output or a node that is not evaluated
  // reads it, directly or through evaluated views (views stay in the graph:
  // folding one would copy a param to save nothing). Non-view evaluated nodes
  // whose value is needed outside are the boundaries that become params.
  const std::unordered_set<const ir::Node*> eval_set(evaluated.begin(), evaluated.end());
  std::unordered_map<const ir::Value*, std::vector<ir::Node*>> users;
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* v : node->operands) users[v].push_back(node.get());
  }
  const std::unordered_set<const ir::Value*> outputs(graph.outputs.begin(), graph.outputs.end());
  std::unordered_set<const ir::Value*> needed;
  for (auto it = evaluated.rbegin(); it != evaluated.rend(); ++it) {
    const ir::Value* v = (*it)->result();
    bool need = outputs.contains(v);
    for (const ir::Node* u : users[v]) {
      need =
          need || !eval_set.contains(u) || (u->op->schema.is_view && needed.contains(u->result()));
    }
    if (need) needed.insert(v);
  }
  for (ir::Node* node : evaluated) {
    ir::Value* result = node->result();
    if (node->op->schema.is_view || !needed.contains(result)) continue;
    Tensor value = data.at(result);
    if (!value.is_contiguous()) value = ops::contiguous(value);
    const std::string name = fresh_param_name(graph, ctx);
    ir::Value* param = graph.add_input(name, result->meta, ir::InputKind::param);
    ctx.param_data[name] = value;
    // Readers outside the folded subgraph (and the views kept) move to the
    // new param; the subgraph itself goes below once nothing reads it.
    for (ir::Node* u : users[result]) {
      if (eval_set.contains(u) && !u->op->schema.is_view) continue;
      for (auto& o : u->operands) {
        if (o == result) o = param;
      }
    }
    for (auto& o : graph.outputs) {
      if (o == result) o = param;
    }
  }
  // Erase what folding left unread (only nodes that had readers before).
  // Uses counted once, then kept as nodes go (users first: program order reversed).
  auto uses = detail::use_counts(graph);
  auto drop_unread = [&](const std::vector<ir::Node*>& nodes) {
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const ir::Value* v = (*it)->result();
      if (users[v].empty() || uses[v] != 0) continue;
      for (const ir::Value* o : (*it)->operands) --uses[o];
      graph.erase(*it);
    }
  };
  drop_unread(evaluated);
  drop_unread(constants);
}

}  // namespace

void constant_folding(ir::Graph& graph, PassContext& ctx) {
  fold_literals(graph, detail::mutated_roots(graph));
  if (ctx.frozen_parameter) fold_params(graph, ctx, detail::mutated_roots(graph));
}

}  // namespace sinkgraph::passes
