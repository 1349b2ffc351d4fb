#pragma once
// Subcommands of the `sinkgraph` tool. Each registers itself on the app and
// sets `status` when it runs; sinkgraph::Error escaping a command exits 2.
#include <string>

#include <CLI/CLI.hpp>

#include "sinkgraph/error.h"

namespace sinkgraph::tools {

// An error that every rank of a tensor-parallel job raises alike, at the same
// point (--tensor-parallel against the world size): main() reports it and
// each rank exits 2 by itself, without MPI_Abort, which would let the first
// rank to fail end the others before they said it.
class SameOnEveryRank : public Error {
 public:
  using Error::Error;
};

void add_generate_command(CLI::App& app, int& status);
void add_make_model_command(CLI::App& app, int& status);
void add_ir_command(CLI::App& app, int& status);
void add_demo_command(CLI::App& app, int& status);
void add_convert_command(CLI::App& app, int& status);

}  // namespace sinkgraph::tools
