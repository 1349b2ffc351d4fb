#pragma once
// Subcommands of the `sinkgraph` tool. Each registers itself on the app and
// sets `status` when it runs; sinkgraph::Error escaping a command exits 2.
#include <cstdint>
#include <optional>
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

// Note [One way to read a value] (values.cpp): attaches to every option of
// every subcommand the check its type needs (decimal integers in range,
// finite reals, no empty value). Call once, after the commands are added.
void check_values(CLI::App& app);

enum class ValueKind : std::uint8_t { text, integer, unsigned_integer, real };
// What is wrong with `text` as a value of `kind`, or nullopt.
std::optional<std::string> value_error(const std::string& text, ValueKind kind);
// A decimal integer by the same rules; throws sinkgraph::Error "<where>: ...".
std::int64_t parse_integer(const std::string& text, const std::string& where);
std::uint64_t parse_unsigned(const std::string& text, const std::string& where);

}  // namespace sinkgraph::tools
