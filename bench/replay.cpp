// Capture and replay costs for graphs of N no-op kernels (N = 10 .. 10,000),
// so kernel work is excluded and what remains is the runtime's own overhead:
//  - BM_ReplayLaunch:      host time of one GraphExec::launch (must not grow with N)
//  - BM_ReplayPerNode:     launch + synchronize, reported per node (the worker's
//                          per-node overhead)
//  - BM_CaptureInstantiate: begin_capture, N launches, end_capture, instantiate; per node
//  - BM_EagerPerOp:        the same N kernels launched one by one, then synchronize; per op
#include <benchmark/benchmark.h>

#include "sinkgraph/device_graph.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

void noop(const sg::ArgBlock&, sg::KernelContext&) {}

sg::ArgBlock noop_args() {
  sg::ArgBlock a{};
  a.num_scalars = 1;
  return a;
}

std::unique_ptr<sg::GraphExec> capture_noops(sg::Stream& stream, std::int64_t n) {
  auto pool = stream.device().allocator().create_pool("bench");
  stream.begin_capture(pool);
  const sg::ArgBlock args = noop_args();
  for (std::int64_t i = 0; i < n; ++i) stream.launch(noop, args, "noop");
  return stream.end_capture().instantiate();
}

void BM_ReplayLaunch(benchmark::State& state) {
  auto stream = sg::cpu().create_stream();
  auto exec = capture_noops(*stream, state.range(0));
  std::int64_t i = 0;
  for (auto _ : state) {
    exec->launch(*stream, {});
    if (++i % 64 == 0) {
      state.PauseTiming();
      stream->synchronize();
      state.ResumeTiming();
    }
  }
  stream->synchronize();
}

void BM_ReplayPerNode(benchmark::State& state) {
  auto stream = sg::cpu().create_stream();
  auto exec = capture_noops(*stream, state.range(0));
  for (auto _ : state) {
    exec->launch(*stream, {});
    stream->synchronize();
  }
  state.counters["ns_per_node"] =
      benchmark::Counter(static_cast<double>(state.iterations() * state.range(0)),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_CaptureInstantiate(benchmark::State& state) {
  auto stream = sg::cpu().create_stream();
  for (auto _ : state) {
    auto exec = capture_noops(*stream, state.range(0));
    benchmark::DoNotOptimize(exec);
  }
  state.counters["ns_per_node"] =
      benchmark::Counter(static_cast<double>(state.iterations() * state.range(0)),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_EagerPerOp(benchmark::State& state) {
  auto stream = sg::cpu().create_stream();
  const sg::ArgBlock args = noop_args();
  for (auto _ : state) {
    for (std::int64_t i = 0; i < state.range(0); ++i) stream->launch(noop, args, "noop");
    stream->synchronize();
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(state.iterations() * state.range(0)),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_ReplayLaunch)->RangeMultiplier(10)->Range(10, 10000);
BENCHMARK(BM_ReplayPerNode)->RangeMultiplier(10)->Range(10, 10000)->UseRealTime();
BENCHMARK(BM_CaptureInstantiate)->RangeMultiplier(10)->Range(10, 10000)->UseRealTime();
BENCHMARK(BM_EagerPerOp)->RangeMultiplier(10)->Range(10, 10000)->UseRealTime();

BENCHMARK_MAIN();
