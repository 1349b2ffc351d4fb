// Host-side cost of eager launches (issue: foundation benchmarks).
//  - BM_EagerAddLaunch: one ops::add of 64 floats, host time only (the stream
//    worker runs the kernels concurrently; we synchronize outside the timing
//    every 512 launches so the queue never fills).
//  - BM_EagerAdd10k: 10,000 launches followed by one synchronize, reported per
//    operator.
// Both use the default stream and its default spin-then-park policy.
#include <vector>

#include <benchmark/benchmark.h>

#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

std::vector<float> ramp(int n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return v;
}

void BM_EagerAddLaunch(benchmark::State& state) {
  const auto values = ramp(64);
  const sg::Tensor a = sg::Tensor::from_floats(values, {64});
  const sg::Tensor b = sg::Tensor::from_floats(values, {64});
  sg::Stream& stream = sg::current_stream();
  stream.synchronize();
  std::int64_t n = 0;
  for (auto _ : state) {
    sg::Tensor c = sg::ops::add(a, b);
    benchmark::DoNotOptimize(c);
    if (++n % 512 == 0) {
      state.PauseTiming();
      stream.synchronize();
      state.ResumeTiming();
    }
  }
  stream.synchronize();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EagerAddLaunch);

void BM_EagerAdd10k(benchmark::State& state) {
  constexpr int kOps = 10000;
  const auto values = ramp(64);
  const sg::Tensor a = sg::Tensor::from_floats(values, {64});
  const sg::Tensor b = sg::Tensor::from_floats(values, {64});
  sg::Stream& stream = sg::current_stream();
  stream.synchronize();
  for (auto _ : state) {
    for (int i = 0; i < kOps; ++i) {
      sg::Tensor c = sg::ops::add(a, b);
      benchmark::DoNotOptimize(c);
    }
    stream.synchronize();
  }
  state.SetItemsProcessed(state.iterations() * kOps);
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kOps),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EagerAdd10k)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
