// The `sinkgraph` command-line tool. Exit status: 0 success, 2 any user error
// (bad flag, bad file, bad ids, too long), 1 an internal error.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>

#include "commands.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/version.h"

namespace {

// Note [Temporary files] in sinkgraph/files.h: an interrupted run leaves no
// half-written output behind. The handler only unlinks (async-signal-safe),
// then dies of the same signal.
void on_fatal_signal(int sig) {
  sinkgraph::remove_temp_files_on_signal();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// stdout is the product of --print-ids, --stats and `ir --print`: a full
// device or a closed stdout must not pass for success.
bool stdout_ok() {
  std::cout.flush();
  const bool c_ok = std::fflush(stdout) == 0 && std::ferror(stdout) == 0;
  return c_ok && !std::cout.fail();
}

// A failed rank of a tensor-parallel job ends every rank (Note
// [Tensor-parallel generate]): the others may be waiting in a collective
// for it. `code` is the exit status the job reports.
// Note [One line per error]: an error is one line, whatever it quotes. A
// path or value holding a newline (or another control character) would split
// it, so those are printed escaped, as \n or \xHH.
std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

int fail(int code) {
  std::fflush(stderr);
  if (sinkgraph::dist::initialized() && sinkgraph::dist::world_size() > 1) {
    sinkgraph::dist::abort(code);
  }
  return code;
}

// CLI11 reports a flag given twice as "At Most 1 required but received 2":
// true, but it names neither the repetition nor the values. This names both,
// as typed, or returns "" where no option of a parsed command was repeated.
std::string repeated_flag(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() < 2 || opt->get_expected_max() != 1) continue;
      std::string values;
      for (const std::string& v : opt->results())
        values += (values.empty() ? "'" : ", '") + v + "'";
      return opt->get_name() + " is given " + std::to_string(opt->count()) + " times (" + values +
             "); give it once";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) std::signal(sig, on_fatal_signal);
  CLI::App app{"sinkgraph: graph capture-and-replay runtime"};
  app.set_version_flag("--version", std::string("sinkgraph ") + sinkgraph::version(),
                       "print 'sinkgraph X.Y.Z' and exit");
  app.require_subcommand(1);
  int status = 0;
  sinkgraph::tools::add_generate_command(app, status);
  sinkgraph::tools::add_make_model_command(app, status);
  sinkgraph::tools::add_ir_command(app, status);
  sinkgraph::tools::add_demo_command(app, status);
  sinkgraph::tools::add_convert_command(app, status);
  sinkgraph::tools::check_values(app);  // Note [One way to read a value]
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help or --version: printed to stdout, checked below
      (void)app.exit(e);
      if (!stdout_ok()) {
        std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
        return 2;
      }
      return 0;
    }
    // One line, as every other error (CLI11's own adds a second, "Run with --help").
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      if (const std::string repeated = repeated_flag(app); !repeated.empty()) {
        std::fprintf(stderr, "error: %s\n", one_line(repeated).c_str());
        return 2;
      }
    }
    std::fprintf(stderr, "error: %s (see --help)\n", one_line(e.what()).c_str());
    return 2;
  } catch (const sinkgraph::tools::SameOnEveryRank& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 2;
  } catch (const sinkgraph::Error& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return fail(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", one_line(e.what()).c_str());
    return fail(1);
  }
  if (!stdout_ok()) {
    std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
    return 2;
  }
  return status;
}
