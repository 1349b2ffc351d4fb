// `sinkgraph ir FILE [--passes a,b] [--print]`: parse, verify, run passes.
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ir.h"
#include "sinkgraph/passes.h"

namespace sinkgraph::tools {

void add_ir_command(CLI::App& app, int& status) {
  struct Options {
    std::string file;
    std::vector<std::string> passes;
    bool print = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("ir", "Parse and verify an IR file, run passes, print the result");
  cmd->add_option("file", options->file, "IR text file (docs/ir.md)")->required();
  cmd->add_option("--passes", options->passes, "passes to run in order, comma separated")
      ->delimiter(',');
  cmd->add_flag("--print", options->print, "print the resulting IR on stdout");
  cmd->callback([options, &status] {
    // Unknown pass names fail before any work.
    passes::PassManager manager;
    for (const auto& name : options->passes) manager.add(passes::find_pass(name));
    std::ifstream in(options->file, std::ios::binary);
    SG_CHECK(in.good(), options->file, ": cannot open the file");
    std::stringstream text;
    text << in.rdbuf();
    auto graph = ir::parse(text.str(), options->file);
    ir::verify(*graph, options->file);
    passes::PassContext ctx;
    manager.run(*graph, ctx);
    if (options->print) std::cout << ir::print(*graph);
    status = 0;
  });
}

}  // namespace sinkgraph::tools
