#pragma once
// Graph passes and the pass manager. Every built-in pass lives in its own file
// in src/passes/ and is declared in the one list of builtin_passes().
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
  // Data of `param` inputs by input name (set by the compiler; may be empty).
  std::unordered_map<std::string, Tensor> param_data;
};

struct Pass {
  std::string name;
  std::function<void(ir::Graph&, PassContext&)> run;
};

// dce, cse, constant_folding, remove_noop_ops, pattern_fusion_pass,
// fuse_elementwise (in that order).
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

// Graphviz DOT of a graph: inputs, nodes with their types, edges, outputs.
SG_API std::string to_dot(const ir::Graph& graph);

}  // namespace sinkgraph::passes
