// The `sinkgraph` command-line tool. Until the Llama model lands, its main job
// (`sinkgraph demo`) shows eager execution on the CPU device: a few operators,
// their results, and the device's counters.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

int run_demo() {
  sg::Stream& stream = sg::current_stream();
  stream.reset_counters();
  const auto before = sg::dispatch_counters();

  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  const sg::Tensor w = sg::Tensor::from_floats({1, 0, 0, 1, 1, 1}, {2, 3});  // [N=2, K=3]
  const sg::Tensor g = sg::Tensor::from_floats({1, 1}, {2});
  const sg::Tensor y = sg::ops::linear(x, w);         // x @ w^T
  const sg::Tensor a = sg::ops::silu(y);
  const sg::Tensor n = sg::ops::rms_norm(a, g, 1e-5);
  const sg::Tensor p = sg::ops::softmax(n);
  const sg::Tensor i = sg::ops::argmax(p);
  fmt::print("x           = {}  {}\n", x.str(), x.to_floats());
  fmt::print("linear(x,w) = {}  {}\n", y.str(), y.to_floats());
  fmt::print("silu        = {}\n", a.to_floats());
  fmt::print("rms_norm    = {}\n", n.to_floats());
  fmt::print("softmax     = {}\n", p.to_floats());
  fmt::print("argmax      = {}\n", i.to_ints());

  const auto after = sg::dispatch_counters();
  const auto c = stream.counters();
  const auto m = sg::cpu().allocator().stats();
  fmt::print("\ndevice {} stream '{}':\n", stream.device().name(), stream.name());
  fmt::print("  operators dispatched   {}\n", after.dispatches - before.dispatches);
  fmt::print("  queue entries launched {} ({} kernels ran)\n", c.launches, c.kernels);
  fmt::print("  host launch time       {:.1f} us ({:.2f} us per launch)\n", c.host_launch_ns / 1e3,
             c.launches ? c.host_launch_ns / 1e3 / static_cast<double>(c.launches) : 0.0);
  fmt::print("  device busy / idle     {:.1f} us / {:.1f} us\n", c.device_busy_ns / 1e3,
             c.device_idle_ns() / 1e3);
  fmt::print("  allocator              {}\n", sg::to_string(m));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sinkgraph: graph capture-and-replay runtime"};
  app.require_subcommand(1);
  auto* demo = app.add_subcommand("demo", "Run a few operators eagerly on the CPU device");
  int status = 0;
  demo->callback([&] { status = run_demo(); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const sg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return status;
}
