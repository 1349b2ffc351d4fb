#pragma once
// Subcommands of the `sinkgraph` tool. Each registers itself on the app and
// sets `status` when it runs; sinkgraph::Error escaping a command exits 2.
#include <CLI/CLI.hpp>

namespace sinkgraph::tools {

void add_generate_command(CLI::App& app, int& status);
void add_make_model_command(CLI::App& app, int& status);
void add_ir_command(CLI::App& app, int& status);
void add_demo_command(CLI::App& app, int& status);
void add_convert_command(CLI::App& app, int& status);

}  // namespace sinkgraph::tools
