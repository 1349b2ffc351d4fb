// bench_compiled_call: the README's "Compiling your own function" program,
// y = matmul(gelu(matmul(x, w1)), w2) with x[B, 256], w1[256, 1024],
// w2[1024, 256] and a dynamic batch, timed per call including the host read
// (issue 33's C++ target: a replay is never slower than eager running the same
// kernels).
//
// Columns, interleaved in one run (each round times every column once, in a
// rotated order, and each column's time is the median of --calls calls):
//   ops      the body called directly: eager ops, no compile()
//   eager    compile() in mode "eager" (trace once, run the graph's ops)
//   RO       mode "reduce-overhead" (capture per batch size, replay)
//   MA       mode "max-autotune" (generated regions, captured)
//   RO/w     reduce-overhead called with CallOptions{.wait = true}: the replay
//            runs on the calling thread (Note [Replays on the caller])
//   MA/w     max-autotune, the same
// `--function tiny` times x + 1 on [B, 8] instead: nearly no kernel work, so
// each column's time is its fixed cost per call.
// The report gives each column's median per-call time and its ratio to `ops`,
// median [min-max] over rounds, for every batch size and compute-thread count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "noise.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/device.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

constexpr std::int64_t kDim = 256;
constexpr std::int64_t kHidden = 1024;

using sgbench::noise;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Column {
  std::string name;
  std::function<float()> call;   // one call with its host read; returns a value to keep
  std::vector<double> round_us;  // median per-call µs, per round
  double busy_ns = 0;            // the stream worker's kernel time, all timed calls
  double host_launch_ns = 0;     // host time inside launch(), all timed calls
  std::int64_t timed = 0;
};

// Median µs of `calls` calls of `fn`, after `warmup` untimed ones.
double time_calls(const std::function<float()>& fn, int calls, int warmup, float& sink) {
  for (int i = 0; i < warmup; ++i) sink += fn();
  std::vector<double> us(static_cast<std::size_t>(calls));
  for (double& t : us) {
    const auto start = std::chrono::steady_clock::now();
    sink += fn();
    t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  return median(std::move(us));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The README's compiled function: eager ops against compile() in each mode"};
  int rounds = 7;
  int calls = 300;
  std::vector<std::int64_t> batches{1, 4, 16};
  std::vector<int> threads{1, 2};
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1, 1000));
  app.add_option("--calls", calls, "timed calls per column and round")
      ->check(CLI::Range(1, 100000));
  app.add_option("--batch", batches, "batch sizes");
  app.add_option("--threads", threads, "compute-thread counts");
  std::vector<std::string> only;
  std::vector<std::string> settings;
  std::string function = "readme";
  app.add_option("--function", function,
                 "readme: the README's matmul-gelu-matmul; tiny: x + 1 on [batch, 8], so what is "
                 "timed is the call's fixed cost")
      ->check(CLI::IsMember({"readme", "tiny"}));
  app.add_option("--set", settings, "CompilerConfig options for every compiled column, key=value");

  app.add_option("--only", only, "time only these columns (and ops), e.g. for a profiler");
  CLI11_PARSE(app, argc, argv);

  const sg::Tensor w1 = sg::Tensor::from_floats(noise(kDim * kHidden, 1, 0.1F), {kDim, kHidden});
  const sg::Tensor w2 = sg::Tensor::from_floats(noise(kHidden * kDim, 2, 0.1F), {kHidden, kDim});
  const bool tiny = function == "tiny";
  const std::int64_t width = tiny ? 8 : kDim;
  const auto body = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(a[0]);
    if (tiny) return {sg::ops::add_scalar(x, 1.0)};
    return {sg::ops::matmul(sg::ops::gelu(sg::ops::matmul(x, w1)), w2)};
  };
  const auto compiled = [&](const char* mode) {
    sg::CompilerConfig config;
    config.set("mode", mode);
    for (const std::string& kv : settings) {
      const auto eq = kv.find('=');
      config.set(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
    }
    sg::TraceOptions options;
    options.dynamic_dims[0] = {0};
    return sg::compile(body, sg::get_backend(config), options);
  };

  float sink = 0;
  fmt::print("{:>7} {:>7}  {:>6}  {:>9}  {:>22}  {:>9}  {:>9}\n", "threads", "batch", "column",
             "median us", "vs ops: median [min-max]", "worker us", "launch us");
  for (const int t : threads) {
    sg::set_num_threads(t);
    for (const std::int64_t b : batches) {
      const sg::Tensor x = sg::Tensor::from_floats(noise(b * width, 3, 1.0F), {b, width});
      auto eager = compiled("eager");
      auto ro = compiled("reduce-overhead");
      auto ma = compiled("max-autotune");
      // Each call reads its output back on the host, as a user's program does.
      const auto read = [](const sg::Tensor& y) { return y.to_floats()[0]; };
      std::vector<Column> cols{
          {"ops", [&] { return read(body(std::vector<sg::Arg>{x})[0]); }, {}},
          {"eager", [&] { return read((*eager)({x})[0]); }, {}},
          {"RO", [&] { return read((*ro)({x})[0]); }, {}},
          {"MA", [&] { return read((*ma)({x})[0]); }, {}},
          {"RO/w", [&] { return read(ro->call({x}, {.wait = true})[0]); }, {}},
          {"MA/w", [&] { return read(ma->call({x}, {.wait = true})[0]); }, {}},
      };
      if (!only.empty()) {
        std::erase_if(cols, [&](const Column& c) {
          return c.name != "ops" && std::find(only.begin(), only.end(), c.name) == only.end();
        });
      }
      // Every column must give the same values before it is timed.
      const std::vector<float> want = body(std::vector<sg::Arg>{x})[0].to_floats();
      for (auto* fn : {&eager, &ro, &ma}) {
        const std::vector<float> got = (**fn)({x})[0].to_floats();
        for (std::size_t i = 0; i < want.size(); ++i) {
          if (std::abs(got[i] - want[i]) > 1e-4F * (1.0F + std::abs(want[i]))) {
            fmt::print(stderr, "mismatch at {}: {} vs {}\n", i, got[i], want[i]);
            return 1;
          }
        }
      }
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t k = 0; k < cols.size(); ++k) {
          Column& c = cols[(k + static_cast<std::size_t>(r)) % cols.size()];
          sg::Stream& stream = sg::current_stream();
          stream.synchronize();
          const sg::StreamCounters before = stream.counters();
          c.round_us.push_back(time_calls(c.call, calls, calls / 10 + 5, sink));
          const sg::StreamCounters after = stream.counters();
          c.busy_ns += static_cast<double>(after.device_busy_ns - before.device_busy_ns);
          c.host_launch_ns += static_cast<double>(after.host_launch_ns - before.host_launch_ns);
          c.timed += calls + calls / 10 + 5;
        }
      }
      for (const Column& c : cols) {
        std::vector<double> ratio;
        for (int r = 0; r < rounds; ++r) {
          ratio.push_back(cols[0].round_us[static_cast<std::size_t>(r)] /
                          c.round_us[static_cast<std::size_t>(r)]);
        }
        const auto n = static_cast<double>(std::max<std::int64_t>(c.timed, 1));
        fmt::print("{:>7} {:>7}  {:>6}  {:>9.1f}  {:>8.2f} [{:.2f}-{:.2f}]  {:>9.1f}  {:>9.1f}\n",
                   t, b, c.name, median(c.round_us), median(ratio),
                   *std::min_element(ratio.begin(), ratio.end()),
                   *std::max_element(ratio.begin(), ratio.end()), c.busy_ns / n / 1e3,
                   c.host_launch_ns / n / 1e3);
      }
    }
  }
  std::fprintf(stderr, "(checksum %g)\n", static_cast<double>(sink));
  return 0;
}
