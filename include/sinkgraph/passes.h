#pragma once
// Graph passes and the pass manager. Every built-in pass lives in its own file
// in src/passes/ and is declared in the one list of builtin_passes().
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sinkgraph/export.h"
#include "sinkgraph/ir.h"

namespace sinkgraph::passes {

// What a pass may know beyond the graph.
struct PassContext {
  // Params promise never to change (CompilerConfig::frozen_parameter): passes
  // may compute from their data at compile time.
  bool frozen_parameter = false;
  // The captured graph will be generated as C++ (max-autotune with
  // CompilerConfig::codegen): pattern_fusion_pass leaves projections apart,
  // since a generated region runs them in one kernel anyway and a merged
  // weight would be a second copy of the model's (Note [Merged weights are copies]).
  bool codegen = false;
  // Data of `param` inputs by input name (set by the compiler; may be empty).
  std::unordered_map<std::string, Tensor> param_data;
};

struct Pass {
  std::string name;
  std::function<void(ir::Graph&, PassContext&)> run;
};

// dce, cse, constant_folding, remove_noop_ops, inplace_pass,
// input_inplace_pass, remove_cat_ops, pattern_fusion_pass, fuse_elementwise,
// fold_conv_batch_norm, fuse_conv_activation (in that order).
SG_API const std::vector<Pass>& builtin_passes();
// Throws sinkgraph::Error naming the unknown pass and listing the known ones.
SG_API const Pass& find_pass(const std::string& name);

class SG_API PassManager {
 public:
  void add(Pass pass);
  [[nodiscard]] const std::vector<Pass>& passes() const { return passes_; }
  // Runs every pass in order, verifying the graph after each. With a non-empty
  // `debug_save` folder, writes 00_input.ir, 01_<pass>.ir, ... and final.dot.
  void run(ir::Graph& graph, PassContext& ctx, const std::string& debug_save = "") const;

 private:
  std::vector<Pass> passes_;
};

// Note [Memory planning]
// At capture, shapes are concrete (one graph key), so every intermediate's
// size and live range is known. plan_memory() groups values by storage (views,
// in-place results and placement hints share their root's memory), gives each
// group of fresh memory a live range from the node that creates it to the last
// use of any value in the group (graph outputs: to the end), and assigns byte
// offsets in ONE arena: in a given order, each into the best-fitting gap among
// the groups whose ranges overlap its own (best fit), keeping the smallest
// arena over several greedy orders and seeded random ones (memory_planning.cpp). Two
// groups share bytes only when their ranges are disjoint; a node's output
// never overlaps an input that dies at that node (ranges include both ends).
// lower_bound_bytes is the liveness bound: the most bytes live at any node, a
// floor no assignment can beat. Sizes are rounded up to kPlanAlignment.
struct MemoryPlan {
  static constexpr std::int64_t kPlanAlignment = 64;
  struct Buffer {
    const ir::Node* node = nullptr;  // creates the memory (its result is the root)
    std::int64_t bytes = 0;          // aligned
    std::int64_t offset = 0;         // in the arena
    std::size_t first = 0;           // node indices, inclusive
    std::size_t last = 0;
  };
  std::vector<Buffer> buffers;  // in program order of `node`
  std::unordered_map<const ir::Node*, std::size_t> by_node;
  std::int64_t arena_bytes = 0;
  std::int64_t lower_bound_bytes = 0;
  // The buffer of a node whose result is placed (fresh memory), or null.
  [[nodiscard]] const Buffer* find(const ir::Node& node) const {
    const auto it = by_node.find(&node);
    return it == by_node.end() ? nullptr : &buffers[it->second];
  }
};
// Plans the fresh intermediates of `graph` for concrete symbol values. With
// assign=false only the buffers, live ranges and lower bound are computed
// (linear time; offsets stay 0 and arena_bytes 0).
SG_API MemoryPlan plan_memory(const ir::Graph& graph, const SymBindings& bindings,
                              bool assign = true);

// Graphviz DOT of a graph: inputs, nodes with their types, edges, outputs.
SG_API std::string to_dot(const ir::Graph& graph);

}  // namespace sinkgraph::passes
