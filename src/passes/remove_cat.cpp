// remove_cat_ops: the inputs of a cat are produced directly into their slices
// of its output, so the cat copies nothing.
//
// Note [Cat removal]
//   %a = matmul(%x, %w1) : f32[4,8]
//   %b = silu(%y) : f32[4,8]
//   %c = cat([%a, %b], dim=1, placed=true) : f32[4,16]
// `placed=true` (Note [Placement hints] in ir.h) says: %c's memory is made
// before %a's producer runs, %a is the slice [:, 0:8] of it and %b the slice
// [:, 8:16], and the cat itself launches nothing (the dispatcher's cat skips
// every input that already is its slice). The node stays as the value's
// definition, so the graph still reads as before and prints and parses back.
// It is sound when every operand is the fresh result of an operator with a
// kernel of its own (no view, in-place result, reuse or composite: those do
// not own their memory) whose only use is this cat, once, and is not a graph
// output: then nothing but the cat ever sees that the operand lives inside
// the cat's output, and a kernel writes a strided output as well as a
// contiguous one (Note [Kernel ABI]). All operands or none are placed.
//
// Cost: O(nodes + operands), linear.
#include "passes_internal.h"

namespace sinkgraph::passes {

void remove_cat_ops(ir::Graph& graph, PassContext& /*ctx*/) {
  for (const auto& node : graph.nodes()) {
    if (node->op_name() != "cat" || node->placed) continue;
    bool ok = true;
    for (const ir::Value* o : node->operands) {
      const ir::Node* p = o->producer;
      ok = ok && p != nullptr && p->aliased_operand() < 0 && p->op->composite == nullptr &&
           graph.num_uses(o) == 1;
    }
    node->placed = ok;
  }
}

}  // namespace sinkgraph::passes
