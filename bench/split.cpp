// bench_split: where splitting a kernel across compute threads starts to pay
// (Note [Splitting a kernel's work], docs/performance.md "Steady numbers").
//
// BM_SplitAdd/N/T times 16 queued a + b on N floats each, then one
// synchronize, at T compute threads; BM_SplitMatvec/N/T the same for
// linear(x[1, 256], w[N, 256]), the matrix-vector product of a decode step.
// The tensors stay in cache, as a small model's do. The kernels split only
// past kMinParallelWork elements a part, so below 2 x that T = 2 runs the
// T = 1 code: the sizes start at the threshold and double. From two columns
// of one run, the handoff a split adds is h = t(T=2) - t(T=1) / 2 per kernel,
// and splitting pays from the part size whose one-thread time equals h.
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "noise.h"
#include "sinkgraph/device.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

constexpr int kQueued = 16;

using sgbench::noise;

template <typename Op>
void time_queued(benchmark::State& state, const Op& op) {
  sg::set_num_threads(static_cast<int>(state.range(1)));
  sg::Stream& stream = sg::current_stream();
  stream.synchronize();
  for (auto _ : state) {
    for (int i = 0; i < kQueued; ++i) benchmark::DoNotOptimize(op());
    stream.synchronize();
  }
  // Seconds per kernel (printed as, e.g., 4.1u).
  state.counters["per_kernel"] = benchmark::Counter(
      kQueued, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  sg::set_num_threads(sg::available_cores());
}

void BM_SplitAdd(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const sg::Tensor a = sg::Tensor::from_floats(noise(n, 1), {n});
  const sg::Tensor b = sg::Tensor::from_floats(noise(n, 2), {n});
  time_queued(state, [&] { return sg::ops::add(a, b); });
}

void BM_SplitMatvec(benchmark::State& state) {
  constexpr std::int64_t k = 256;
  const std::int64_t rows = state.range(0) / k;
  const sg::Tensor x = sg::Tensor::from_floats(noise(k, 1), {1, k});
  const sg::Tensor w = sg::Tensor::from_floats(noise(rows * k, 2), {rows, k});
  time_queued(state, [&] { return sg::ops::linear(x, w); });
}

// N: elements the kernel touches (for the product, the weight's), from
// 2 x 2^15 (two parts at the threshold) to 2^20.
void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t n = std::int64_t{1} << 16; n <= (std::int64_t{1} << 20); n *= 2) {
    for (std::int64_t t : {1, 2}) b->Args({n, t});
  }
}

BENCHMARK(BM_SplitAdd)->Apply(sizes)->ArgNames({"N", "T"})->UseRealTime();
BENCHMARK(BM_SplitMatvec)->Apply(sizes)->ArgNames({"N", "T"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
