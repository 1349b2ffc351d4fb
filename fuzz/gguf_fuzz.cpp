// libFuzzer target for the GGUF reader (docs/model.md, "GGUF"). Any input
// either parses into a model or raises sinkgraph::Error; anything else (a
// crash, a sanitizer report, another exception, a leak, a hang, an allocation
// beyond -malloc_limit_mb) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto model = sinkgraph::models::parse_gguf(std::span(data, size), "fuzz");
    // Every weight was read from the input: the embedding alone, at the
    // densest type (Q4_0, 18 bytes per 32 values), fits in it.
    const auto& c = model.config();
    if (static_cast<std::uint64_t>(c.vocab_size * c.dim) * 18 / 32 > size) {
      std::fprintf(stderr, "parsed a model larger than its %zu-byte input: %s\n", size,
                   c.str().c_str());
      std::abort();
    }
  } catch (const sinkgraph::Error&) {
  }
  return 0;
}
