// pattern_fusion_pass (max-autotune): rewrites the patterns the Llama decoder
// produces into fewer, larger kernels.
//
// (1) Projections of one input. linear(h, w_i) for several `param` weights
//     w_i (q/k/v; w1/w3) become ONE linear(h, w_cat), w_cat being the
//     row-concatenation of the w_i computed now; each old result becomes a
//     slice of the merged output. Only with ctx.frozen_parameter (Note
//     [Merged weights are copies]).
// (2) Rotary embeddings of adjacent head ranges. rope(slice(x, 1, a, b)) and
//     rope(slice(x, 1, b, c)) with equal attributes become one
//     rope(slice(x, 1, a, c)), and the two results slices of it. rope rotates
//     each (position, head) row on its own, so this is bitwise exact; after
//     (1), q and k are such ranges of the merged qkv output.
// (3) mul(silu(a), b), where nothing else reads silu(a), becomes
//     silu_mul(a, b) (either operand order: a product commutes exactly).
// (4) Residual add and rms_norm. s = add(x, r) (same shapes and floating
//     dtype, no broadcast) and the first n = rms_norm(s, w, eps) become
//     f = add_rms_norm(x, r, w, eps), standing where the add stood, with
//     s = view(slice(f, 0, 0, 1), shape) and n = view(slice(f, 0, 1, 2),
//     shape) (the add's view is dropped when the rms_norm was its only
//     reader). Bitwise exact: the kernel stores the sum as add does and
//     normalizes the stored row with rms_norm's own row code. Skipped when s
//     or n is a graph output, when s, n or w's storage is written in place
//     anywhere, when w is not yet computed where the add stands, and where a
//     placement hint (reuse, a placed cat) already fixed s's or n's memory.
//
// Note [Two results in one tensor]
// The op model gives an operator ONE result, and (4) needs two: the sum,
// which the next residual add reads again, and its norm. Writing the sum into
// a mutated operand would hide a data edge from every pass (docs/ir.md, "In-
// place operators"); instead the operator returns both stacked in one
// [2, ...] tensor, like an Inductor multi-output buffer, and each old result
// becomes a view of its half. Slices of dim 0 of a contiguous tensor are
// contiguous, so both results keep their dtypes, shapes AND contiguity:
// `view` and every kernel accept them, and they may be graph-visible values
// like any other. The halves share one storage root, so the in-place and
// memory-planning passes treat them as one buffer that lives until the last
// reader of either half (inplace_pass never writes over a view).
//
// Soundness. Results keep their names, dtypes and shapes; only layouts
// change: a result that was a fresh tensor becomes a strided slice of a
// larger one (Note [Views as results]). A rewrite that computes a node
// earlier (a merged linear or rope stands where the first of its group
// stood; add_rms_norm normalizes where the add stood) or later (silu_mul
// reads `a` where the mul stood) is skipped when the storage it reads is
// written in place anywhere in the graph.
//
// Note [Merged weights are copies]
// w_cat is a NEW param input ("fused_w0", ...) whose data this pass stores in
// ctx.param_data, as constant_folding does with folded params; the compiler
// binds it like the traced params. It is a copy made at compile time: were a
// weight later modified in place or moved, the graph would go on computing
// with the stale copy. So the merge runs only under frozen_parameter, the
// promise that params never change; without it the linears stay apart. It
// also doubles those weights' memory (the model keeps its own), so it does not
// run when the graph is generated as C++ (PassContext::codegen), where the
// separate projections share one kernel anyway: max-autotune's default then
// holds each weight once.
//
// Note [Views as results]
// Kernels accept strided inputs (Note [Kernel ABI]), and slice/transpose/
// permute compose strides, but `view` refuses a non-contiguous input. A
// rewrite therefore requires that nothing `view`s the new strided result,
// directly or through other views, and that it is not a graph output (an
// output keeps the layout the caller had). In (1) a `view` that splits the
// last dimension into heads ([.., N] -> [.., N/D, D], as the model does for
// q, k and v) is kept working by viewing the merged output into heads first
// and slicing the head dimension: the slice stands where the view stood.
//
// Cost: each rewrite is local (a node and its operands, O(1) in-place
// rewrites); the walks over the graph are linear: near-linear in nodes.
#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "passes_internal.h"
#include "sinkgraph/ops.h"

namespace sinkgraph::passes {
namespace {

using Users = std::unordered_map<const ir::Value*, std::vector<ir::Node*>>;

Users users_of(const ir::Graph& graph) {
  Users users;
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* v : node->operands) users[v].push_back(node.get());
  }
  return users;
}

// The nodes of operator `op`, in graph order (collected first: fusing edits
// the node list).
std::vector<ir::Node*> nodes_named(const ir::Graph& graph, std::string_view op) {
  std::vector<ir::Node*> out;
  for (const auto& node : graph.nodes()) {
    if (node->op_name() == op) out.push_back(node.get());
  }
  return out;
}

bool is_output(const ir::Graph& graph, const ir::Value* v) {
  return std::find(graph.outputs.begin(), graph.outputs.end(), v) != graph.outputs.end();
}

// Note [Views as results]: may `v` become a strided view?
bool tolerates_strided(const ir::Graph& graph, const Users& users, const ir::Value* v) {
  if (is_output(graph, v)) return false;
  const auto it = users.find(v);
  if (it == users.end()) return true;
  return std::ranges::none_of(it->second, [&](const ir::Node* u) {
    return u->op_name() == "view" ||
           (u->op->schema.alias_of >= 0 && !tolerates_strided(graph, users, u->result()));
  });
}

std::int64_t concrete(const SymInt& s) { return s.maybe_value().value_or(-1); }

std::vector<ir::NamedAttr> slice_attrs(std::int64_t dim, std::int64_t start, std::int64_t end) {
  return {
      {"dim", SymInt(dim)}, {"start", SymInt(start)}, {"end", SymInt(end)}, {"step", SymInt(1)}};
}

const OpDef& op_named(const char* name) { return OpRegistry::instance().get(name); }

bool before(const ir::Graph& graph, const ir::Node* a, const ir::Node* b) {
  for (const auto& node : graph.nodes()) {
    if (node.get() == a) return true;
    if (node.get() == b) return false;
  }
  return false;
}

std::string fresh_param_name(const ir::Graph& graph, const PassContext& ctx) {
  for (int i = 0;; ++i) {
    std::string name = "fused_w" + std::to_string(i);
    if (graph.find(name) == nullptr && !ctx.param_data.contains(name)) return name;
  }
}

// ---- (1) projections of one input ------------------------------------------

struct Member {
  ir::Node* linear;
  std::int64_t rows;                  // N_i
  std::vector<ir::Node*> head_views;  // view(r_i, [..., N_i/D, D])
};

// The head size D when `u` = view(r, r.shape[:-1] + [N/D, D]); 0 otherwise.
std::int64_t head_split(const ir::Node& u, const ir::Value* r) {
  const SymShape& in = r->meta.shape;
  const SymShape& out = u.result()->meta.shape;
  if (out.size() != in.size() + 1) return 0;
  for (int i = 0; i + 1 < in.size(); ++i) {
    if (!(out[i] == in[i])) return 0;
  }
  const std::int64_t heads = concrete(out[out.size() - 2]);
  const std::int64_t d = concrete(out[out.size() - 1]);
  const std::int64_t n = concrete(in[in.size() - 1]);
  return heads > 0 && d > 0 && heads * d == n ? d : 0;
}

bool merge_group(ir::Graph& graph, PassContext& ctx, ir::Value* h, std::vector<Member> members) {
  const Users users = users_of(graph);
  std::int64_t head = 0;  // common D of the head views, 0 while none
  std::vector<Member> kept;
  for (Member& m : members) {
    const ir::Value* r = m.linear->result();
    bool ok = !is_output(graph, r);
    const auto it = users.find(r);
    for (ir::Node* u : it == users.end() ? std::vector<ir::Node*>{} : it->second) {
      if (!ok) break;
      if (u->op_name() == "view") {
        const std::int64_t d = head_split(*u, r);
        ok = d > 0 && (head == 0 || head == d) && tolerates_strided(graph, users, u->result());
        if (ok) head = d;
        m.head_views.push_back(u);
      } else if (u->op->schema.alias_of >= 0) {
        ok = tolerates_strided(graph, users, u->result());
      }
    }
    if (ok) kept.push_back(std::move(m));
  }
  if (kept.size() < 2) return false;
  if (head > 0) {
    for (const Member& m : kept) {
      if (m.rows % head != 0) return false;
    }
  }
  // The merged weight: rows of every member's weight in order (Note [Merged weights are copies]).
  std::vector<Tensor> weights;
  std::int64_t total = 0;
  for (const Member& m : kept) {
    weights.push_back(ctx.param_data.at(m.linear->operands[1]->name));
    total += m.rows;
  }
  const ir::Value* w0 = kept.front().linear->operands[1];
  const std::string name = fresh_param_name(graph, ctx);
  ctx.param_data[name] = ops::contiguous(ops::cat(weights, 0));
  ir::Value* w_cat = graph.add_input(
      name, TensorMeta{w0->meta.dtype, SymShape{SymInt(total), w0->meta.shape[1]}, w0->meta.device},
      ir::InputKind::param);

  ir::Node* first = kept.front().linear;
  ir::Value* merged = graph.add_node(op_named("linear"), {h, w_cat}, {}, "", first)->result();
  const int last = merged->meta.shape.size() - 1;
  ir::Value* heads = nullptr;
  if (head > 0) {
    std::vector<SymInt> shape(merged->meta.shape.begin(), merged->meta.shape.end());
    shape.back() = SymInt(total / head);
    shape.emplace_back(head);
    heads = graph.add_node(op_named("view"), {merged}, {{"shape", shape}}, "", first)->result();
  }
  std::int64_t offset = 0;
  for (const Member& m : kept) {
    for (ir::Node* u : m.head_views) {
      detail::replace_node(graph, u, op_named("slice"), {heads},
                           slice_attrs(last, offset / head, (offset + m.rows) / head));
    }
    if (graph.num_uses(m.linear->result()) == 0) {
      graph.erase(m.linear);
    } else {
      detail::replace_node(graph, m.linear, op_named("slice"), {merged},
                           slice_attrs(last, offset, offset + m.rows));
    }
    offset += m.rows;
  }
  return true;
}

void merge_projections(ir::Graph& graph, PassContext& ctx) {
  const auto mutated = detail::mutated_roots(graph);
  std::vector<std::pair<ir::Value*, std::vector<Member>>> groups;
  for (const auto& node : graph.nodes()) {
    if (node->op_name() != "linear") continue;
    ir::Value* h = node->operands[0];
    const ir::Value* w = node->operands[1];
    if (!w->is_input() || w->kind != ir::InputKind::param || mutated.contains(w) ||
        mutated.contains(detail::alias_root(h))) {
      continue;
    }
    const auto data = ctx.param_data.find(w->name);
    if (data == ctx.param_data.end() || !data->second.defined()) continue;
    const std::int64_t rows = concrete(w->meta.shape[0]);
    if (rows <= 0 || concrete(w->meta.shape[1]) < 0) continue;
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == h; });
    if (it == groups.end()) it = groups.insert(groups.end(), {h, {}});
    it->second.push_back({node.get(), rows, {}});
  }
  for (auto& [h, members] : groups) {
    if (members.size() >= 2) merge_group(graph, ctx, h, std::move(members));
  }
}

// ---- (2) rotary embeddings of adjacent head ranges -------------------------

struct HeadRange {
  ir::Node* slice = nullptr;
  std::int64_t start = 0, end = 0;
};

// x = slice(base, dim 1 of 3, start, end, step 1) with concrete bounds.
bool head_range(const ir::Value* x, HeadRange& out) {
  const ir::Node* s = x->producer;
  if (s == nullptr || s->op_name() != "slice" || x->meta.shape.size() != 3) return false;
  const std::int64_t dim = concrete(std::get<SymInt>(*s->attr("dim")));
  if (dim != 1 && dim != -2) return false;
  if (concrete(std::get<SymInt>(*s->attr("step"))) != 1) return false;
  const std::int64_t start = concrete(std::get<SymInt>(*s->attr("start")));
  const std::int64_t end = concrete(std::get<SymInt>(*s->attr("end")));
  const std::int64_t size = concrete(s->operands[0]->meta.shape[1]);
  if (start < 0 || end < start || size < 0 || end > size) return false;  // no negative bounds
  out = {const_cast<ir::Node*>(s), start, end};
  return true;
}

bool same_attrs(const ir::Node& a, const ir::Node& b) {
  for (std::size_t i = 0; i < a.attrs.size(); ++i) {
    if (detail::attr_key(a.attrs[i].value) != detail::attr_key(b.attrs[i].value)) return false;
  }
  return true;
}

bool merge_one_rope_pair(ir::Graph& graph) {
  const auto mutated = detail::mutated_roots(graph);
  const Users users = users_of(graph);
  const std::vector<ir::Node*> ropes = nodes_named(graph, "rope");
  for (ir::Node* a : ropes) {
    HeadRange ra;
    if (!head_range(a->operands[0], ra)) continue;
    const ir::Value* base = ra.slice->operands[0];
    if (mutated.contains(detail::alias_root(base))) continue;
    if (!tolerates_strided(graph, users, a->result())) continue;
    for (ir::Node* b : ropes) {
      HeadRange rb;
      if (b == a || !head_range(b->operands[0], rb) || rb.slice->operands[0] != base) continue;
      if (ra.end != rb.start || !same_attrs(*a, *b)) continue;
      if (!tolerates_strided(graph, users, b->result())) continue;
      ir::Node* first = before(graph, a, b) ? a : b;
      ir::Value* both = graph
                            .add_node(op_named("slice"), {const_cast<ir::Value*>(base)},
                                      slice_attrs(1, ra.start, rb.end), "", first)
                            ->result();
      ir::Value* rotated = graph.add_node(op_named("rope"), {both}, a->attrs, "", first)->result();
      detail::replace_node(graph, a, op_named("slice"), {rotated},
                           slice_attrs(1, 0, ra.end - ra.start));
      detail::replace_node(graph, b, op_named("slice"), {rotated},
                           slice_attrs(1, rb.start - ra.start, rb.end - ra.start));
      for (ir::Node* s : {ra.slice, rb.slice}) {
        if (graph.num_uses(s->result()) == 0) graph.erase(s);
      }
      return true;
    }
  }
  return false;
}

// ---- (3) mul(silu(a), b) -> silu_mul(a, b) ---------------------------------

void fuse_silu_mul(ir::Graph& graph) {
  const auto mutated = detail::mutated_roots(graph);
  const std::vector<ir::Node*> muls = nodes_named(graph, "mul");
  for (ir::Node* mul : muls) {
    for (std::size_t which = 0; which < 2; ++which) {
      ir::Value* s = mul->operands[which];
      ir::Node* silu = s->producer;
      if (silu == nullptr || silu->op_name() != "silu" || graph.num_uses(s) != 1) continue;
      ir::Value* a = silu->operands[0];
      if (mutated.contains(detail::alias_root(a)) || mutated.contains(s)) continue;
      ir::Value* b = mul->operands[1 - which];
      detail::replace_node(graph, mul, op_named("silu_mul"), {a, b}, {});
      graph.erase(silu);
      break;
    }
  }
}

// ---- (4) rms_norm(add(x, r)) -> add_rms_norm(x, r) -------------------------

// The first rms_norm in program order that normalizes `s` (reads it as x).
ir::Node* first_norm_of(const ir::Graph& graph, const Users& users, const ir::Value* s) {
  const auto it = users.find(s);
  if (it == users.end()) return nullptr;
  ir::Node* norm = nullptr;
  for (ir::Node* u : it->second) {
    if (u->op_name() != "rms_norm" || u->operands[0] != s) continue;
    if (norm == nullptr || before(graph, u, norm)) norm = u;
  }
  return norm;
}

// slice(f, 0, half, half + 1), inserted before `at`: half `half` of the
// [2, ...] result, contiguous (a slice of dim 0 of a contiguous tensor), so a
// `view` gives it back the old shape.
ir::Value* half_of(ir::Graph& graph, ir::Value* f, std::int64_t half, ir::Node* at) {
  return graph.add_node(op_named("slice"), {f}, slice_attrs(0, half, half + 1), "", at)->result();
}

// Does a node carrying a placement hint (Note [Placement hints] in ir.h) read
// `v`? Such values are laid out for that node; leave them alone.
bool read_by_placed(const Users& users, const ir::Value* v) {
  const auto it = users.find(v);
  if (it == users.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [](const ir::Node* u) { return u->placed; });
}

bool fuse_one_add_rms_norm(ir::Graph& graph) {
  const auto mutated = detail::mutated_roots(graph);
  const Users users = users_of(graph);
  const std::vector<ir::Node*> adds = nodes_named(graph, "add");
  for (ir::Node* add : adds) {
    ir::Value* s = add->result();
    ir::Value* x = add->operands[0];
    ir::Value* r = add->operands[1];
    const int rank = s->meta.shape.size();
    if (!is_floating(s->meta.dtype) || x->meta.dtype != r->meta.dtype) continue;
    if (!(x->meta.shape == r->meta.shape) || rank < 1 || rank >= kMaxDims) continue;
    if (add->reuse >= 0 || is_output(graph, s) || mutated.contains(detail::alias_root(s)) ||
        read_by_placed(users, s)) {
      continue;
    }
    ir::Node* norm = first_norm_of(graph, users, s);
    if (norm == nullptr) continue;
    ir::Value* n = norm->result();
    ir::Value* w = norm->operands[1];
    if (norm->reuse >= 0 || is_output(graph, n) || mutated.contains(detail::alias_root(n)) ||
        mutated.contains(detail::alias_root(w)) || read_by_placed(users, n)) {
      continue;
    }
    // The fused node stands where the add stood: the weight must exist there.
    if (w->producer != nullptr && (w->producer == add || !before(graph, w->producer, add))) {
      continue;
    }
    const std::vector<SymInt> shape(s->meta.shape.begin(), s->meta.shape.end());
    const bool sum_read = graph.num_uses(s) > 1;  // by more than the rms_norm
    ir::Value* f =
        graph.add_node(op_named("add_rms_norm"), {x, r, w}, norm->attrs, "", add)->result();
    ir::Value* sum = sum_read ? half_of(graph, f, 0, add) : nullptr;
    detail::replace_node(graph, norm, op_named("view"), {half_of(graph, f, 1, norm)},
                         {{"shape", shape}});
    if (sum_read) {
      detail::replace_node(graph, add, op_named("view"), {sum}, {{"shape", shape}});
    } else {
      graph.erase(add);
    }
    return true;
  }
  return false;
}

}  // namespace

void pattern_fusion(ir::Graph& graph, PassContext& ctx) {
  if (ctx.frozen_parameter && !ctx.codegen) merge_projections(graph, ctx);
  while (merge_one_rope_pair(graph)) {
  }
  fuse_silu_mul(graph);
  while (fuse_one_add_rms_norm(graph)) {
  }
}

}  // namespace sinkgraph::passes
