#pragma once
// CapturedGraph: reduce-overhead's concrete graph (TorchAir's AclConcreteGraph).
#include <memory>
#include <string>
#include <vector>

#include "sinkgraph/compiler.h"

namespace sinkgraph::detail {

std::unique_ptr<ConcreteGraph> make_captured_graph(std::unique_ptr<ir::Graph> graph,
                                                   const CompilerConfig& config,
                                                   std::vector<std::string> notes);

// Throws when this thread is capturing a graph: graph @`callee` captures or
// replays, and cannot run inside another capture (Note [Captures run on a
// side stream]). Called before taking any lock, so that the locks of compiled
// functions are always taken before the capture turn.
void check_not_capturing(const std::string& callee);

}  // namespace sinkgraph::detail
