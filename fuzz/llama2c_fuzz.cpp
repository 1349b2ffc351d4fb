// libFuzzer target for the llama2.c checkpoint reader (docs/model.md). Any
// input either parses into a model or raises sinkgraph::Error; anything else
// (a crash, a sanitizer report, another exception, a leak, a hang, an
// allocation beyond -malloc_limit_mb) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto model = sinkgraph::models::parse_llama2c(std::span(data, size), "fuzz");
    // A parsed model's sizes must agree with the input: the reader checks
    // the file size exactly, so the embedding alone fits in it.
    const auto& c = model.config();
    if (static_cast<std::uint64_t>(c.vocab_size * c.dim) * 4 > size) {
      std::fprintf(stderr, "parsed a model larger than its %zu-byte input: %s\n", size,
                   c.str().c_str());
      std::abort();
    }
  } catch (const sinkgraph::Error&) {
  }
  return 0;
}
