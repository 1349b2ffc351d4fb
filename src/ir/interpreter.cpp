// Runs a graph through the eager dispatcher: each node is one run_op call.
#include <unordered_map>

#include "sinkgraph/ir.h"
#include "sinkgraph/shape.h"

namespace sinkgraph::ir {

SymBindings bind_symbols(const Graph& graph, std::span<const RtValue> inputs) {
  const auto& ins = graph.inputs();
  SG_CHECK(inputs.size() == ins.size(), "graph @", graph.name, " takes ", ins.size(),
           " inputs but got ", inputs.size());
  SymBindings bindings;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const Value* v = ins[i];
    if (v->is_sym) {
      const auto* value = std::get_if<std::int64_t>(&inputs[i]);
      SG_CHECK(value != nullptr, "graph @", graph.name, ": input %", v->name,
               " is a sym and needs an integer, got a tensor");
      bindings[v->name] = *value;
    }
  }
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const Value* v = ins[i];
    if (v->is_sym) continue;
    const auto* t = std::get_if<Tensor>(&inputs[i]);
    SG_CHECK(t != nullptr && t->defined(), "graph @", graph.name, ": input %", v->name,
             " needs a tensor");
    SG_CHECK(t->dtype() == v->meta.dtype, "graph @", graph.name, ": input %", v->name,
             " has dtype ", dtype_name(t->dtype()), "; expected ", dtype_name(v->meta.dtype));
    SG_CHECK(t->ndim() == v->meta.shape.size(), "graph @", graph.name, ": input %", v->name,
             " has shape ", shape_str(t->shape()), "; expected ", shape_str(v->meta.shape));
    for (int d = 0; d < t->ndim(); ++d) {
      const SymInt& want = v->meta.shape[d];
      const std::int64_t got = t->size(d);
      if (want.is_symbolic()) {
        const auto syms = want.free_symbols();
        // A dim that is exactly a symbol binds it (first occurrence wins).
        if (syms.size() == 1 && want == SymInt::symbol(syms[0]) && !bindings.contains(syms[0])) {
          bindings[syms[0]] = got;
          continue;
        }
      }
      const std::int64_t expect = want.eval(bindings);
      SG_CHECK(expect == got, "graph @", graph.name, ": input %", v->name, " has shape ",
               shape_str(t->shape()), "; expected ", shape_str(v->meta.shape), " (dimension ", d,
               " should be ", expect, ")");
    }
  }
  return bindings;
}

namespace {
// Substitutes symbol values into an attribute so the dispatcher sees integers.
ScalarValue concretize(const ScalarValue& attr, const SymBindings& bindings) {
  if (const auto* s = std::get_if<SymInt>(&attr)) return SymInt(s->eval(bindings));
  if (const auto* list = std::get_if<std::vector<SymInt>>(&attr)) {
    std::vector<SymInt> out;
    out.reserve(list->size());
    for (const auto& d : *list) out.emplace_back(d.eval(bindings));
    return out;
  }
  return attr;
}
}  // namespace

// Note [Intermediates die at their last reader]
// An eager program frees a tensor when its last use is done, and a caching
// allocator hands the block to the next allocation on the same stream at
// once: CUDA graph captures and TorchAir's reduce-overhead get their private
// pool's reuse that way. The interpreter held every intermediate until the
// graph ended, so a capture took a fresh block for each one: efficientnet_b0's
// reduce-overhead pool reserved 55 MB against a liveness bound of 9.6 MB,
// and every kernel wrote to memory no cache held (docs/performance.md,
// "Intermediates that die"). Now each value that is not a graph output is
// dropped from the environment after the last node reading it is launched;
// its block frees when nothing else holds its storage (a view, an in-place
// result or a placed cat share it and keep it). Stream order makes the reuse
// safe: the block is reusable by the same stream at once (Note
// [Stream-ordered reuse]), and a later kernel that writes it is queued, or
// recorded in the capture, after every kernel that reads the old value.
// A runner may defer its kernels (a generated region launches when it is
// flushed, after nodes the interpreter has moved past), so with a runner
// nothing is dropped before the end: max-autotune plans its memory instead.
namespace {
// Per value read by a node: the index of the last node reading it (graph
// outputs never die here).
std::unordered_map<const Value*, std::size_t> last_readers(const Graph& graph) {
  std::unordered_map<const Value*, std::size_t> last;
  std::size_t index = 0;
  for (const auto& node : graph.nodes()) {
    for (const Value* v : node->operands) last[v] = index;
    if (!last.contains(node->result())) last[node->result()] = index;  // never read
    ++index;
  }
  for (const Value* v : graph.outputs) last.erase(v);
  for (const Value* v : graph.inputs()) last.erase(v);
  return last;
}
}  // namespace

std::vector<RtValue> interpret(const Graph& graph, std::span<const RtValue> inputs,
                               const NodeObserver& observer, const PlacementFn& placement,
                               const NodeRunner& runner) {
  const SymBindings bindings = bind_symbols(graph, inputs);
  std::unordered_map<const Value*, Tensor> env;
  // Note [Intermediates die at their last reader]: dies_after[i], the values
  // node i reads (or produces unread) for the last time.
  std::vector<std::vector<const Value*>> dies_after;
  if (!runner) {
    dies_after.resize(graph.nodes().size());
    for (const auto& [value, index] : last_readers(graph)) dies_after[index].push_back(value);
  }
  for (std::size_t i = 0; i < graph.inputs().size(); ++i) {
    if (const auto* t = std::get_if<Tensor>(&inputs[i])) env[graph.inputs()[i]] = *t;
  }
  // Note [Placement hints] in ir.h: operands of a placed cat are produced
  // into their slices of the cat's output, which exists from the first one on.
  struct Slot {
    const Node* cat;
    std::int64_t start;
  };
  std::unordered_map<const Node*, Slot> slots;  // producer -> its slice of a placed cat
  std::unordered_map<const Node*, Tensor> cat_outputs;
  for (const auto& node : graph.nodes()) {
    if (!node->placed) continue;
    const int rank = node->result()->meta.shape.size();
    const int dim = wrap_dim(std::get<SymInt>(node->attrs.at(0).value).eval(bindings), rank, "cat");
    std::int64_t start = 0;
    for (const Value* v : node->operands) {
      SG_ASSERT(v->producer != nullptr, "placed cat operand %", v->name, " has no producer");
      slots[v->producer] = {node.get(), start};
      start += v->meta.shape[dim].eval(bindings);
    }
  }
  auto fresh_output = [&](const Node& node) {
    Tensor t;
    if (placement) t = placement(node);
    if (!t.defined()) {
      Shape shape;
      for (const SymInt& d : node.result()->meta.shape) shape.push_back(d.eval(bindings));
      t = Tensor::empty(shape, node.result()->meta.dtype);
    }
    return t;
  };
  std::vector<const Tensor*> operands;
  std::vector<ScalarValue> scalars;
  std::size_t node_index = 0;
  for (const auto& node : graph.nodes()) {
    operands.clear();
    scalars.clear();
    for (const Value* v : node->operands) operands.push_back(&env.at(v));
    for (const auto& a : node->attrs) scalars.push_back(concretize(a.value, bindings));
    Tensor placed;
    if (node->reuse >= 0) {
      placed = *operands.at(static_cast<std::size_t>(node->reuse));
    } else if (const auto slot = slots.find(node.get()); slot != slots.end()) {
      const Node& cat = *slot->second.cat;
      auto [it, first] = cat_outputs.try_emplace(&cat);
      if (first) it->second = fresh_output(cat);
      const Tensor& whole = it->second;
      const int dim =
          wrap_dim(std::get<SymInt>(cat.attrs.at(0).value).eval(bindings), whole.ndim(), "cat");
      Shape shape = whole.shape();
      shape[dim] = node->result()->meta.shape[dim].eval(bindings);
      placed = Tensor(whole.storage(), whole.dtype(), shape, whole.strides(),
                      whole.offset() + slot->second.start * whole.strides()[dim]);
    } else if (node->placed) {
      placed = cat_outputs.at(node.get());
    } else if (placement && node->aliased_operand() < 0) {
      placed = placement(*node);
    }
    Tensor out = runner
                     ? runner(*node, operands, scalars, placed)
                     : run_op(*node->op, operands, scalars, placed.defined() ? &placed : nullptr);
    if (observer) observer(*node, out);
    env[node->result()] = std::move(out);
    if (!dies_after.empty()) {
      for (const Value* v : dies_after[node_index]) env.erase(v);
    }
    ++node_index;
  }
  std::vector<RtValue> out;
  out.reserve(graph.outputs.size());
  for (const Value* v : graph.outputs) {
    if (v->is_sym) {
      const auto it = bindings.find(v->name);
      SG_CHECK(it != bindings.end(), "graph @", graph.name, ": output %", v->name, " is unbound");
      out.emplace_back(it->second);
    } else {
      out.emplace_back(env.at(v));
    }
  }
  return out;
}

}  // namespace sinkgraph::ir
