// libFuzzer target for the safetensors checkpoint reader (docs/model.md),
// with the fixed tiny config.json of fuzz_models.h (the seeds match it, so
// mutations explore the header and the data offsets). Any input either
// parses or raises sinkgraph::Error; anything else is a finding.
#include <cstdint>
#include <span>

#include "fuzz_models.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)sinkgraph::models::parse_safetensors(std::span(data, size),
                                               sinkgraph::fuzz::kTinyConfigJson, "fuzz");
  } catch (const sinkgraph::Error&) {
  }
  return 0;
}
