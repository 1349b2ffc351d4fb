#pragma once
// The model `sinkgraph generate` runs without --model: the stories260K
// checkpoint shipped in models/stories260K/ (DESIGN.md, "The Llama model").
#include <string>

namespace sinkgraph::tools {

// <folder of this executable>/../share/sinkgraph/stories260K/stories260K.bin:
// the installed layout (P/bin/sinkgraph, P/share/sinkgraph/), which the build
// tree mirrors (build/<preset>/tools/sinkgraph, build/<preset>/share/sinkgraph/).
// Throws sinkgraph::Error saying where it looked when the file is missing.
std::string default_model_path();

}  // namespace sinkgraph::tools
