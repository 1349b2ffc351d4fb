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

}  // namespace sinkgraph::detail
