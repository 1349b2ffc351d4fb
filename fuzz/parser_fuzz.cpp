// libFuzzer target for the IR parser (docs/ir.md). Any input either parses or
// raises ir::IrError; a graph that parses must print, parse back to the same
// text, and verify. Anything else (a crash, a sanitizer report, another
// exception, a hang) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sinkgraph/ir.h"

namespace ir = sinkgraph::ir;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<ir::Graph> graph;
  try {
    graph = ir::parse(text, "fuzz.ir");
  } catch (const ir::IrError&) {
    return 0;
  }
  const std::string printed = ir::print(*graph);
  std::unique_ptr<ir::Graph> again;
  try {
    again = ir::parse(printed, "printed.ir");
    ir::verify(*graph, "fuzz.ir");
  } catch (const ir::IrError& e) {
    std::fprintf(stderr, "printed text does not parse back or verify: %s\n%s", e.what(),
                 printed.c_str());
    std::abort();
  }
  if (ir::print(*again) != printed) {
    std::fprintf(stderr, "print is not a fixed point:\n%s---\n%s", printed.c_str(),
                 ir::print(*again).c_str());
    std::abort();
  }
  return 0;
}
