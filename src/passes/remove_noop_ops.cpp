// Removes operators that return their input unchanged:
//   view to the same shape; transpose of a dimension with itself; permute by
//   the identity; slice of a whole dimension with step 1 (views);
//   add of a `full` -0.0 and mul of a `full` 1 whose shape broadcasts to
//   the other operand's without changing it; add_scalar -0.0 and
//   mul_scalar 1;
//   contiguous of a value known contiguous (copies): a fresh node result.
//   Graph inputs are not assumed contiguous: the tracer records
//   contiguous(%p) exactly when a lifted param (or a caller's tensor) is a
//   strided view.
// Uses of the node move to its input, then the node is erased.
//
// One copy is not a no-op but one its reader makes itself: the head
// broadcast of grouped-query attention, read only by a heads-first `sdpa`
// (Note [Grouped heads read in place]).
//
// Only exact IEEE identities go, so every bit of every value is kept: x + -0.0
// is x for every x, but x + +0.0 turns -0.0 into +0.0, which a later 1/x or
// rsqrt turns into +inf instead of -inf (LLVM folds `fadd x, -0.0` and keeps
// `fadd x, 0.0` for the same reason); on integers either zero will do. x * 1
// is x, NaNs aside. A `full` counts as its value only while nothing writes
// its storage: `fill_` through a slice of a `full` makes a later add of it
// no longer an identity.
//
// A copy's result is a tensor of its own; its input is not. So a copy is kept
// when its result or its input shares storage with a tensor written in place
// (a write through one would now show through the other), and when its result
// is a graph output while its input is (a view of) a graph input (the output
// would newly alias the caller's tensor). A view is kept when the removal
// would make a graph output the very Value of a graph input.
//
// Cost: one walk with lazy replacements (detail::Replacements): O(nodes +
// operands), near-linear.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

const SymInt* sym_attr(const ir::Node& node, const char* name) {
  const ir::Attr* a = node.attr(name);
  return a == nullptr ? nullptr : std::get_if<SymInt>(a);
}

const double* real_attr(const ir::Node& node, const char* name) {
  const ir::Attr* a = node.attr(name);
  return a == nullptr ? nullptr : std::get_if<double>(a);
}

using Mutated = std::unordered_set<const ir::Value*>;

// `value` is the identity of `op` ("add" or "mul") on `dtype` (binary
// operands share one dtype): for floats the sign of a zero counts, integers
// have one zero.
bool is_identity(double value, const std::string& op, DType dtype) {
  if (op == "mul") return value == 1.0;
  return value == 0.0 && (std::signbit(value) || is_integral(dtype));
}

// `v` is a `full` holding the identity of `op` on results of dtype `dtype`,
// which no node writes in place.
bool is_identity_full(const ir::Value* v, const std::string& op, DType dtype,
                      const Mutated& mutated) {
  if (v->producer == nullptr || v->producer->op_name() != "full" || mutated.contains(v)) {
    return false;
  }
  const double* d = real_attr(*v->producer, "value");
  return d != nullptr && is_identity(*d, op, dtype);
}

// The input a view node hands back unchanged, or null.
ir::Value* noop_view_input(const ir::Node& node) {
  const std::string& op = node.op_name();
  ir::Value* x = node.operands.at(0);
  const SymShape& shape = x->meta.shape;
  if (op == "view" || op == "reshape") {
    return node.result()->meta.shape == shape ? x : nullptr;
  }
  if (op == "transpose") {
    const SymInt* d0 = sym_attr(node, "dim0");
    const SymInt* d1 = sym_attr(node, "dim1");
    if (shape.empty()) return x;
    if (d0 == nullptr || d1 == nullptr || !d0->maybe_value() || !d1->maybe_value()) return nullptr;
    const int a = wrap_dim(*d0->maybe_value(), shape.size(), "transpose");
    const int b = wrap_dim(*d1->maybe_value(), shape.size(), "transpose");
    return a == b ? x : nullptr;
  }
  if (op == "permute") {
    const auto* dims = std::get_if<std::vector<SymInt>>(node.attr("dims"));
    if (dims == nullptr || static_cast<int>(dims->size()) != shape.size()) return nullptr;
    for (std::size_t i = 0; i < dims->size(); ++i) {
      const auto d = (*dims)[i].maybe_value();
      if (!d || wrap_dim(*d, shape.size(), "permute") != static_cast<int>(i)) return nullptr;
    }
    return x;
  }
  if (op == "slice") {
    const SymInt* dim = sym_attr(node, "dim");
    const SymInt* start = sym_attr(node, "start");
    const SymInt* end = sym_attr(node, "end");
    const SymInt* step = sym_attr(node, "step");
    if (dim == nullptr || start == nullptr || end == nullptr || step == nullptr) return nullptr;
    if (shape.empty() || !dim->maybe_value()) return nullptr;
    const int d = wrap_dim(*dim->maybe_value(), shape.size(), "slice");
    return *start == SymInt(0) && *end == shape[d] && *step == SymInt(1) ? x : nullptr;
  }
  return nullptr;
}

// The input a copying node hands back unchanged (as values), or null.
ir::Value* noop_copy_input(const ir::Node& node, const Mutated& mutated) {
  const std::string& op = node.op_name();
  const TensorMeta& out = node.result()->meta;
  auto same = [&](const ir::Value* v) {
    return v->meta.dtype == out.dtype && v->meta.shape == out.shape;
  };
  if (op == "add" || op == "mul") {
    ir::Value* a = node.operands.at(0);
    ir::Value* b = node.operands.at(1);
    if (is_identity_full(b, op, out.dtype, mutated) && same(a)) return a;
    if (is_identity_full(a, op, out.dtype, mutated) && same(b)) return b;
    return nullptr;
  }
  if (op == "add_scalar" || op == "mul_scalar") {
    const double* value = real_attr(node, "value");
    const bool identity =
        value != nullptr && is_identity(*value, op == "add_scalar" ? "add" : "mul", out.dtype);
    return identity ? node.operands.at(0) : nullptr;
  }
  if (op == "contiguous") {
    ir::Value* x = node.operands.at(0);
    const bool fresh = !x->is_input() && x->producer->op->schema.alias_of < 0;
    return fresh ? x : nullptr;
  }
  return nullptr;
}

// Note [Grouped heads read in place]
// Grouped-query attention written in torch (transformers' repeat_kv, most
// hand-written GQA) copies each of the Hkv kv heads R times before
// scaled_dot_product_attention:
//   %u = unsqueeze(%x, dim=2)                       [B, Hkv, 1, S, D]
//   %e = expand(%u, shape=[B, Hkv, R, S, D])
//   %c = contiguous(%e)
//   %k = view(%c, shape=[B, Hkv*R, S, D])           query head h reads kv head h / R
// The heads-first sdpa operators take k and v with Hkv heads and give query
// head h the kv head h / (H / Hkv), the same one, so k and v become %x
// themselves: no copy of the whole KV cache per layer and step (a decode
// step's largest kernel before this rule). Bitwise: the kernel reads the same
// values in the same order, through strides. Only k and v together (the
// operator wants them of one shape), and only when no node between the copy
// and the sdpa writes %x's storage: the read moves from the copy to the sdpa,
// and must not cross a write (docs/ir.md, "In-place operators"). The copy
// nodes stay for their other readers, if any, and dce takes them otherwise.
struct GroupedHeads {
  ir::Value* source;     // %x, [B, Hkv, S, D]
  const ir::Node* copy;  // the contiguous
};

const ir::Node* produced_by(const ir::Value* v, std::string_view op) {
  return v->producer != nullptr && v->producer->op_name() == op ? v->producer : nullptr;
}

std::optional<GroupedHeads> grouped_heads_copy(const ir::Value* k) {
  const ir::Node* view = produced_by(k, "view");
  const ir::Node* copy =
      view == nullptr ? nullptr : produced_by(view->operands.at(0), "contiguous");
  const ir::Node* expand = copy == nullptr ? nullptr : produced_by(copy->operands.at(0), "expand");
  const ir::Node* unsq =
      expand == nullptr ? nullptr : produced_by(expand->operands.at(0), "unsqueeze");
  if (unsq == nullptr) return std::nullopt;
  ir::Value* x = unsq->operands.at(0);
  const SymShape& xs = x->meta.shape;
  const SymShape& es = expand->result()->meta.shape;
  const SymShape& ks = k->meta.shape;
  const SymInt* dim = sym_attr(*unsq, "dim");
  if (xs.size() != 4 || es.size() != 5 || ks.size() != 4 || dim == nullptr || !dim->maybe_value() ||
      wrap_dim(*dim->maybe_value(), 5, "unsqueeze") != 2 || x->meta.dtype != k->meta.dtype) {
    return std::nullopt;
  }
  const auto hkv = xs[1].maybe_value();
  const auto r = es[2].maybe_value();
  const auto h = ks[1].maybe_value();
  const bool same = es[0] == xs[0] && es[1] == xs[1] && es[3] == xs[2] && es[4] == xs[3] &&
                    ks[0] == xs[0] && ks[2] == xs[2] && ks[3] == xs[3];
  if (!same || !hkv || !r || !h || *h != *hkv * *r) return std::nullopt;
  return GroupedHeads{x, copy};
}

// Writes in place, by position in the graph and the storage they write.
class Writes {
 public:
  explicit Writes(const std::vector<ir::Node*>& nodes) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      position_[nodes[i]] = i;
      for (const std::size_t o : detail::mutated_operands(*nodes[i])) {
        writes_.emplace_back(i, roots_.find(nodes[i]->operands[o]));
      }
    }
  }
  // Whether a node strictly between `from` and `to` writes `value`'s storage.
  bool between(const ir::Node* from, const ir::Node* to, const ir::Value* value) {
    const std::size_t a = position_.at(from), b = position_.at(to);
    const ir::Value* root = roots_.find(value);
    return std::any_of(writes_.begin(), writes_.end(), [&](const auto& w) {
      return w.first > a && w.first < b && w.second == root;
    });
  }

 private:
  detail::AliasRoots roots_;
  std::unordered_map<const ir::Node*, std::size_t> position_;
  std::vector<std::pair<std::size_t, const ir::Value*>> writes_;
};

// Points a heads-first sdpa's k and v at the kv heads their copies broadcast.
void read_grouped_heads(ir::Node& node, Writes& writes) {
  const std::string& op = node.op_name();
  if ((op != "sdpa" && op != "sdpa_mask" && op != "sdpa_causal") || node.operands.size() < 3 ||
      node.operands[0]->meta.shape.size() != 4) {
    return;
  }
  const auto k = grouped_heads_copy(node.operands[1]);
  const auto v = grouped_heads_copy(node.operands[2]);
  if (!k || !v || !(k->source->meta.shape == v->source->meta.shape) ||
      writes.between(k->copy, &node, k->source) || writes.between(v->copy, &node, v->source)) {
    return;
  }
  node.operands[1] = k->source;
  node.operands[2] = v->source;
}

}  // namespace

void remove_noop_ops(ir::Graph& graph, PassContext& /*ctx*/) {
  const auto mutated = detail::mutated_roots(graph);
  detail::AliasRoots roots;
  std::unordered_set<const ir::Value*> outputs(graph.outputs.begin(), graph.outputs.end());
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());
  Writes writes_at(nodes);
  detail::Replacements replaced;
  for (ir::Node* node : nodes) {
    replaced.resolve_operands(*node);
    read_grouped_heads(*node, writes_at);
    if (node->results.size() != 1 || node->operands.empty()) continue;
    ir::Value* result = node->result();
    const bool is_output = outputs.contains(result);
    ir::Value* input = nullptr;
    if (node->op->schema.is_view) {
      input = noop_view_input(*node);
      if (input != nullptr && is_output && input->is_input()) input = nullptr;
    } else if (!detail::mutates(*node)) {
      input = noop_copy_input(*node, mutated);
      if (input != nullptr) {
        const ir::Value* root = roots.find(input);
        const bool writes = mutated.contains(root) || mutated.contains(result);
        if (writes || (is_output && root->is_input())) input = nullptr;
      }
    }
    if (input == nullptr) continue;
    if (is_output) outputs.insert(input);  // the input now shows as that output
    replaced.replace(result, input, node);
  }
  replaced.finish(graph);
}

}  // namespace sinkgraph::passes
