// `sinkgraph demo`: a few operators run eagerly on the CPU device, with their
// results and the stream's counters.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::tools {

namespace {

int run_demo() {
  Stream& stream = current_stream();
  stream.reset_counters();
  const auto before = dispatch_counters();
  const Tensor x = Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor w = Tensor::from_floats({1, 0, 0, 1, 1, 1}, {2, 3});  // [N=2, K=3]
  const Tensor g = Tensor::from_floats({1, 1}, {2});
  const Tensor y = ops::linear(x, w);  // x @ w^T
  const Tensor a = ops::silu(y);
  const Tensor n = ops::rms_norm(a, g, 1e-5);
  const Tensor p = ops::softmax(n);
  const Tensor i = ops::argmax(p);
  fmt::print("x           = {}  {}\n", x.str(), x.to_floats());
  fmt::print("linear(x,w) = {}  {}\n", y.str(), y.to_floats());
  fmt::print("silu        = {}\n", a.to_floats());
  fmt::print("rms_norm    = {}\n", n.to_floats());
  fmt::print("softmax     = {}\n", p.to_floats());
  fmt::print("argmax      = {}\n", i.to_ints());
  const auto after = dispatch_counters();
  const auto c = stream.counters();
  fmt::print("\ndevice {} stream '{}':\n", stream.device().name(), stream.name());
  fmt::print("  operators dispatched   {}\n", after.dispatches - before.dispatches);
  fmt::print("  queue entries launched {} ({} kernels ran)\n", c.launches, c.kernels);
  const auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1e3; };
  fmt::print("  host launch time       {:.1f} us ({:.2f} us per launch)\n", us(c.host_launch_ns),
             c.launches ? us(c.host_launch_ns) / static_cast<double>(c.launches) : 0.0);
  fmt::print("  device busy / idle     {:.1f} us / {:.1f} us\n", us(c.device_busy_ns),
             us(c.device_idle_ns()));
  fmt::print("  allocator              {}\n", to_string(cpu().allocator().stats()));
  return 0;
}

}  // namespace

void add_demo_command(CLI::App& app, int& status) {
  auto* demo = app.add_subcommand("demo", "Run a few operators eagerly on the CPU device");
  demo->callback([&status] { status = run_demo(); });
}

}  // namespace sinkgraph::tools
