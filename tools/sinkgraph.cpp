// The `sinkgraph` command-line tool. Exit status: 0 success, 2 any user error
// (bad flag, bad file, bad ids, too long), 1 an internal error.
#include <cstdio>

#include "commands.h"
#include "sinkgraph/error.h"

int main(int argc, char** argv) {
  CLI::App app{"sinkgraph: graph capture-and-replay runtime"};
  app.require_subcommand(1);
  int status = 0;
  sinkgraph::tools::add_generate_command(app, status);
  sinkgraph::tools::add_make_model_command(app, status);
  sinkgraph::tools::add_ir_command(app, status);
  sinkgraph::tools::add_demo_command(app, status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const sinkgraph::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return status;
}
