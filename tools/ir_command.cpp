// `sinkgraph ir FILE [--passes a,b] [--print]`: parse, verify, run passes.
#include <iostream>

#include "commands.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/ir.h"
#include "sinkgraph/passes.h"

namespace sinkgraph::tools {

namespace {
// The largest IR file `sinkgraph ir` reads (docs/robustness.md).
constexpr std::uint64_t kMaxIrBytes = 64ULL << 20;
}  // namespace

void add_ir_command(CLI::App& app, int& status) {
  struct Options {
    std::string file;
    std::string passes;  // comma separated, split here: an empty name is an error
    bool print = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("ir", "Parse and verify an IR file, run passes, print the result");
  cmd->add_option("file", options->file, "IR text file (docs/ir.md)")->required();
  cmd->add_option("--passes", options->passes, "passes to run in order, comma separated");
  cmd->add_flag("--print", options->print, "print the resulting IR on stdout");
  cmd->callback([options, &status] {
    // Unknown pass names fail before any work.
    passes::PassManager manager;
    if (!options->passes.empty()) {
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = options->passes.find(',', start);
        const std::string name = options->passes.substr(start, comma - start);
        SG_CHECK(!name.empty(), "--passes '", options->passes,
                 "': an empty pass name (two commas in a row, or a comma at an end)");
        manager.add(passes::find_pass(name));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    // Note [Reading untrusted paths]: a regular file, at most kMaxIrBytes.
    const std::string text = read_text_file(options->file, kMaxIrBytes, "IR file");
    auto graph = ir::parse(text, options->file);
    ir::verify(*graph, options->file);
    passes::PassContext ctx;
    manager.run(*graph, ctx);
    if (options->print) std::cout << ir::print(*graph);
    status = 0;
  });
}

}  // namespace sinkgraph::tools
