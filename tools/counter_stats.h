#pragma once
// What every `generate` run reports of its two compiled functions, one
// prompt or many (generate.cpp, batch_generate.cpp).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "generate.h"
#include "sinkgraph/compiler.h"

namespace sinkgraph::tools {

// Adds to `j` the graph counters summed over both compiled functions, their
// captures, pools, peak memory, the KV cache, code generation, the thread
// count and `model`'s facts (weight_bytes, tp_size).
void add_counter_stats(nlohmann::json& j, const GraphCounters& prefill, const GraphCounters& decode,
                       std::int64_t peak_allocated_bytes, std::int64_t kv_cache_bytes,
                       const ModelFacts& model);

// The prefill and decode functions' counters and explain reports (both
// headed "== prefill ==", "== decode =="); empty in eager mode (null).
struct FunctionReports {
  GraphCounters prefill, decode;
  std::string explain, explain_full;
};
FunctionReports report_functions(const CompiledFunction* prefill, const CompiledFunction* decode);

}  // namespace sinkgraph::tools
