#pragma once
// data_dump (CompilerConfig): every node's output from one eager run, as raw
// little-endian f32 files NNN_<value>.f32 plus index.txt (file, operator,
// shape), so a user can compare them against what a replay produces.
#include <string>
#include <vector>

#include "sinkgraph/ir.h"

namespace sinkgraph::detail {

// Runs `graph` eagerly on `inputs`, writing each node's output into `folder`.
std::vector<ir::RtValue> interpret_and_dump(const ir::Graph& graph,
                                            std::span<const ir::RtValue> inputs,
                                            const std::string& folder);

}  // namespace sinkgraph::detail
