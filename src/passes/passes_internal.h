#pragma once
// Shared helpers of the built-in passes (internal). Each pass lives in its own
// file and is declared here so that pass_manager.cpp can list it.
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sinkgraph/ir.h"
#include "sinkgraph/passes.h"

namespace sinkgraph::passes {

// The built-in passes (one file each).
void dce(ir::Graph& graph, PassContext& ctx);
void cse(ir::Graph& graph, PassContext& ctx);
void constant_folding(ir::Graph& graph, PassContext& ctx);
void remove_noop_ops(ir::Graph& graph, PassContext& ctx);
// max-autotune's memory passes (docs/architecture.md, "max-autotune passes").
void inplace_pass(ir::Graph& graph, PassContext& ctx);
void input_inplace_pass(ir::Graph& graph, PassContext& ctx);
void remove_cat_ops(ir::Graph& graph, PassContext& ctx);
// max-autotune's fusion passes (docs/architecture.md, "max-autotune passes: fusion").
void pattern_fusion(ir::Graph& graph, PassContext& ctx);
void fuse_elementwise(ir::Graph& graph, PassContext& ctx);
// max-autotune's convolution passes (docs/architecture.md, "max-autotune passes: convolutions").
void fold_conv_batch_norm(ir::Graph& graph, PassContext& ctx);
void fuse_conv_activation(ir::Graph& graph, PassContext& ctx);

namespace detail {

// Indices into node.operands of the tensors the node writes in place (the
// schema's ArgSpecs with mutated=true; a tensor_list contributes each element;
// and a `reuse` operand, Note [Placement hints] in ir.h).
std::vector<std::size_t> mutated_operands(const ir::Node& node);
inline bool mutates(const ir::Node& node) { return !mutated_operands(node).empty(); }

// The value whose storage `value` shares: follows views, the results of
// in-place operators (schema alias_of) and `reuse` hints back to a fresh node
// result or an input. O(length of the alias chain): a pass asking for many
// values uses AliasRoots instead.
const ir::Value* alias_root(const ir::Value* value);

// alias_root for a whole pass: near O(1) per query (union-find with path
// compression), so a chain of n in-place results costs O(n), not O(n^2).
// alias(v, onto) records a new sharing (inplace_pass setting a `reuse`).
class AliasRoots {
 public:
  const ir::Value* find(const ir::Value* value);
  void alias(const ir::Value* value, const ir::Value* onto);

 private:
  std::unordered_map<const ir::Value*, const ir::Value*> parent_;
};

// Value replacements made during one forward walk over the nodes, applied
// lazily: each node's operands are resolved when the walk reaches it
// (resolve_operands), the outputs and the erasures at the end (finish). One
// replace_all_uses per replaced value would make a pass O(nodes^2).
class Replacements {
 public:
  // Uses of `from` become uses of `to`; `node` (which produced `from`) goes.
  void replace(ir::Value* from, ir::Value* to, ir::Node* node) {
    to_[from] = to;
    erased_.push_back(node);
  }
  ir::Value* resolve(ir::Value* value);
  void resolve_operands(ir::Node& node);
  void finish(ir::Graph& graph);

 private:
  std::unordered_map<ir::Value*, ir::Value*> to_;
  std::vector<ir::Node*> erased_;
};

// Uses of every value (operands and graph outputs), counted in one walk.
std::unordered_map<const ir::Value*, int> use_counts(const ir::Graph& graph);

// Roots (alias_root) of every tensor written in place anywhere in the graph.
std::unordered_set<const ir::Value*> mutated_roots(const ir::Graph& graph);

// Makes `old` a node of `op` in place (Graph::rewrite): the result keeps its
// name, position and uses. Returns it. O(1).
ir::Node* replace_node(ir::Graph& graph, ir::Node* old, const OpDef& op,
                       std::vector<ir::Value*> operands, std::vector<ir::NamedAttr> attrs);

// Canonical text of an attribute: SymInts canonical, doubles by their bits
// (so equal text means equal attribute), lists elementwise.
std::string attr_key(const ir::Attr& attr);
// Human-readable attribute (for DOT labels).
std::string attr_str(const ir::Attr& attr);

// Type text "f32[s0,64]" ("sym" for a sym value).
std::string type_str(const ir::Value& value);

// Operators whose kernel reads input element i only to write output element i
// (of the same shape): they may write their output over an input (Note
// [In-place reuse] in inplace.cpp).
bool is_elementwise_in_place_safe(const OpDef& op);

}  // namespace detail
}  // namespace sinkgraph::passes
