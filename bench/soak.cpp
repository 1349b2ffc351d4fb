// Soak: many replays of one compiled function, with every output also used
// by an operator (so each call leaves a use fence, Note [Output uses]) and
// read back now and then, while resident memory, the graph's pool, the
// allocator's reservation and the memory held back for queued work are
// sampled. They must stay flat: a replay allocates nothing on the device, and
// fences and deferred frees are released as the streams pass them.
//
//   bench_soak [--replays N] [--samples K]      (defaults: 1000000, 10)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "sinkgraph/compiler.h"
#include "sinkgraph/ops.h"

namespace sg = sinkgraph;

namespace {

std::int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

std::int64_t arg_value(int argc, char** argv, const std::string& name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::strtoll(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t replays = arg_value(argc, argv, "--replays", 1000000);
  const std::int64_t samples = std::max<std::int64_t>(1, arg_value(argc, argv, "--samples", 10));
  const sg::Tensor w = sg::Tensor::from_floats(std::vector<float>(64 * 64, 0.01F), {64, 64});
  const auto body = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(a[0]);
    return {sg::ops::silu(sg::ops::add_scalar(sg::ops::matmul(x, w), 1.0))};
  };
  sg::CompilerConfig config;
  config.set("mode", "reduce-overhead");
  auto fn = sg::compile(body, sg::get_backend(config));
  const sg::Tensor x = sg::Tensor::from_floats(std::vector<float>(4 * 64, 0.5F), {4, 64});
  const float want = (*fn)({x})[0].to_floats()[0];

  std::printf("%12s %14s %14s %14s %12s %10s\n", "replays", "rss_bytes", "pool_bytes",
              "reserved_bytes", "deferred", "wall_s");
  const auto start = sg::now_ns();
  const std::int64_t every = std::max<std::int64_t>(1, replays / samples);
  std::int64_t first_rss = 0, max_rss = 0, first_pool = -1;
  bool pool_flat = true, values_right = true;
  for (std::int64_t i = 1; i <= replays; ++i) {
    const sg::Tensor y = (*fn)({x})[0];
    const sg::Tensor z = sg::ops::mul_scalar(y, 1.0);  // a use of the output: leaves a fence
    if (i % 4096 == 0 || i == replays) values_right &= z.to_floats()[0] == want;
    if (i % every == 0 || i == replays) {
      sg::current_stream().synchronize();
      const std::int64_t rss = rss_bytes();
      const sg::GraphCounters c = fn->counters();
      const sg::AllocatorStats s = sg::cpu().allocator().stats();
      const std::int64_t deferred = sg::cpu().allocator().deferred_bytes();
      if (first_rss == 0) first_rss = rss;
      max_rss = std::max(max_rss, rss);
      if (first_pool < 0) first_pool = c.pool_reserved_bytes;
      pool_flat &= c.pool_reserved_bytes == first_pool;
      std::printf("%12lld %14lld %14lld %14lld %12lld %10.2f\n", static_cast<long long>(i),
                  static_cast<long long>(rss), static_cast<long long>(c.pool_reserved_bytes),
                  static_cast<long long>(s.reserved_bytes), static_cast<long long>(deferred),
                  static_cast<double>(sg::now_ns() - start) / 1e9);
    }
  }
  const sg::GraphCounters c = fn->counters();
  std::printf(
      "captured %lld, replayed %lld; rss grew %lld bytes after the first sample; pool %s; "
      "values %s\n",
      static_cast<long long>(c.captured), static_cast<long long>(c.replayed),
      static_cast<long long>(max_rss - first_rss), pool_flat ? "flat" : "GREW",
      values_right ? "right" : "WRONG");
  return pool_flat && values_right ? 0 : 1;
}
