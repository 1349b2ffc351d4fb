// bench_linear: linear(x[M, K], w[N, K]) on the compute threads against
// OpenBLAS's sgemm on one thread (docs/performance.md, "Compute threads").
//
// BM_Linear/M/N/K/T runs ops::linear eagerly at T compute threads, one
// product per iteration, synchronized each time; BM_Sgemm/M/N/K is
// cblas_sgemm(x, w^T) called directly, the reference the kernel replaced for
// more than 32 rows (a prefill's products). Shapes are the dim-512 model's
// (q/k/v/o 512 x 512, w1/w3 1376 x 512, w2 512 x 1376) and TinyLlama-1.1B's
// (2048 x 2048, 5632 x 2048). BM_MatmulRowMajor/BM_SgemmRowMajor do the
// same for matmul with a row-major right operand. Report ratios from one
// run: the rows share the machine's state. BM_LinearOwn is BM_Linear with
// oneDNN switched off (sinkgraph's own tiles past 32 rows). BM_LinearQ times
// the quantized products (linear_q) with the weight in L2 and streamed.
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "noise.h"
#include "sinkgraph/device.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sg = sinkgraph;

namespace {

using sgbench::noise;

void count_flops(benchmark::State& state) {
  const double flops = 2.0 * static_cast<double>(state.range(0) * state.range(1) * state.range(2));
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The product a benchmark times: ops::linear(x, w[N, K]); ops::matmul(x,
// b[K, N]) with a row-major b; ops::matmul(x, w[N, K]^T), a transposed view
// (an nn.Linear as the PyTorch front end converts it past 8 rows).
enum class Form { linear, row_major_b, transposed_w };

// The product of `form`, eagerly at state.range(3) compute threads,
// synchronized each call; with `own`, oneDNN switched off (Note [Matrix
// products through oneDNN]).
void time_ops(benchmark::State& state, Form form, bool own = false) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  sg::set_num_threads(static_cast<int>(state.range(3)));
  sg::ops::set_use_onednn(!own && sg::ops::onednn_built());
  const sg::Tensor x = sg::Tensor::from_floats(noise(m * k, 1), {m, k});
  const bool row_major_b = form == Form::row_major_b;
  const sg::Tensor w =
      sg::Tensor::from_floats(noise(n * k, 2), row_major_b ? sg::Shape{k, n} : sg::Shape{n, k});
  const sg::Tensor wt = sg::ops::transpose(w, 0, 1);
  sg::Stream& stream = sg::current_stream();
  for (auto _ : state) {
    sg::Tensor out = form == Form::linear        ? sg::ops::linear(x, w)
                     : form == Form::row_major_b ? sg::ops::matmul(x, w)
                                                 : sg::ops::matmul(x, wt);
    stream.synchronize();
    benchmark::DoNotOptimize(out);
  }
  count_flops(state);
  sg::set_num_threads(sg::available_cores());
  sg::ops::set_use_onednn(sg::ops::onednn_built());
}

// The same product through cblas_sgemm on one thread.
void time_sgemm(benchmark::State& state, bool row_major_b) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  openblas_set_num_threads(1);
  const auto x = noise(m * k, 1), w = noise(n * k, 2);
  std::vector<float> out(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, row_major_b ? CblasNoTrans : CblasTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0F,
                x.data(), static_cast<blasint>(k), w.data(),
                static_cast<blasint>(row_major_b ? n : k), 0.0F, out.data(),
                static_cast<blasint>(n));
    benchmark::DoNotOptimize(out.data());
  }
  count_flops(state);
}

void BM_Linear(benchmark::State& state) { time_ops(state, Form::linear); }
// The same on sinkgraph's own kernels only (past 32 rows: the tiles).
void BM_LinearOwn(benchmark::State& state) { time_ops(state, Form::linear, true); }
// matmul(x, w^T): no batch invariance to keep, so oneDNN past 8 rows.
void BM_MatmulTransposedW(benchmark::State& state) { time_ops(state, Form::transposed_w); }
void BM_Sgemm(benchmark::State& state) { time_sgemm(state, false); }
// matmul(x[M, K], b[K, N]) with a row-major b (attention's probabilities @
// v through the PyTorch front end), against sgemm(x, b).
void BM_MatmulRowMajor(benchmark::State& state) { time_ops(state, Form::row_major_b); }
void BM_SgemmRowMajor(benchmark::State& state) { time_sgemm(state, true); }

// {M, N, K}: a prefill's rows against each weight shape.
const std::vector<std::vector<std::int64_t>> kShapes = {
    {64, 512, 512},   {256, 512, 512}, {64, 1376, 512},   {256, 1376, 512},
    {256, 512, 1376}, {33, 512, 512},  {128, 2048, 2048}, {128, 5632, 2048},
};

void linear_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes) {
    for (std::int64_t t : {1, 2}) b->Args({s[0], s[1], s[2], t});
  }
}

void sgemm_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes) b->Args(s);
}

BENCHMARK(BM_Linear)->Apply(linear_args)->ArgNames({"M", "N", "K", "T"})->UseRealTime();
BENCHMARK(BM_LinearOwn)->Apply(linear_args)->ArgNames({"M", "N", "K", "T"})->UseRealTime();
BENCHMARK(BM_Sgemm)->Apply(sgemm_args)->ArgNames({"M", "N", "K"})->UseRealTime();
// Batched decode's products (docs/performance.md, "Batched decoding"): 1, 4
// and 16 rows against the built-in model's weights (q/k/v/o 288 x 288, w1/w3
// 768 x 288, w2 288 x 768, the classifier 32000 x 288), one thread. The
// 16-row time over the 1-row time is what a B = 16 decode step pays for
// its products.
BENCHMARK(BM_Linear)
    ->ArgsProduct({{1, 4, 16}, {288, 768, 32000}, {288}, {1}})
    ->Args({1, 288, 768, 1})
    ->Args({4, 288, 768, 1})
    ->Args({16, 288, 768, 1})
    ->ArgNames({"M", "N", "K", "T"})
    ->UseRealTime();
// A few rows against an encoder's weights (d_model 256, feed-forward 1024):
// linear's row kernel against matmul(x, w^T) through oneDNN.
void few_rows_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t m : {4, 5, 8, 16, 32}) {
    for (const auto& nk : {std::vector<std::int64_t>{768, 256}, {1024, 256}, {256, 1024}}) {
      for (std::int64_t t : {1, 2}) b->Args({m, nk[0], nk[1], t});
    }
  }
}
BENCHMARK(BM_Linear)->Apply(few_rows_args)->ArgNames({"M", "N", "K", "T"})->UseRealTime();
BENCHMARK(BM_MatmulTransposedW)
    ->Apply(few_rows_args)
    ->ArgNames({"M", "N", "K", "T"})
    ->UseRealTime();
// A vision transformer's tokens (197 at 224 x 224, patches of 16) and a
// prefill's 64 to 512 against the same weights: the products that oneDNN
// cuts into blocks (onednn_matmul.cpp).
void many_rows_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t m : {64, 197, 256, 512}) {
    for (const auto& nk : {std::vector<std::int64_t>{768, 256}, {1024, 256}, {256, 1024}}) {
      for (std::int64_t t : {1, 2}) b->Args({m, nk[0], nk[1], t});
    }
  }
}
BENCHMARK(BM_MatmulTransposedW)
    ->Apply(many_rows_args)
    ->ArgNames({"M", "N", "K", "T"})
    ->UseRealTime();
BENCHMARK(BM_MatmulRowMajor)
    ->ArgsProduct({{8, 128}, {512}, {512}, {1, 2}})
    ->ArgNames({"M", "N", "K", "T"})
    ->UseRealTime();
BENCHMARK(BM_SgemmRowMajor)
    ->ArgsProduct({{8, 128}, {512}, {512}})
    ->ArgNames({"M", "N", "K"})
    ->UseRealTime();

// Quantized products (docs/performance.md, "Quantized weights"):
// ops::linear_q with Q8_0 (F = 0) or Q4_0 (F = 1) blocks, M rows of x
// against N rows of K values, eagerly at T compute threads. The shapes: N =
// 256 at K = 2048 (295 KB of Q4_0, 557 KB of Q8_0: in L2, so mostly the
// call's fixed cost and the kernel's own rate), TinyLlama-1.1B's matrices
// (2048 x 2048, 5632 x 2048, 2048 x 5632: a few MB, which a large
// last-level cache may keep between calls), and N = 262144 at K = 2048
// (302 MB of Q4_0, 570 MB of Q8_0), past a 260 MB last-level cache, so
// that every call streams it from memory as a decode step does. Counters:
// the weight's bytes read per second and its blocks per second (each block
// is read once per call, whatever M). Every block's scale is 1/64, its
// values noise.
void BM_LinearQ(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto format = static_cast<sg::ops::QuantFormat>(state.range(4));
  sg::set_num_threads(static_cast<int>(state.range(3)));
  const std::int64_t bb = sg::ops::quant_block_bytes(format);
  const std::int64_t row_blocks = k / sg::ops::kQuantBlockValues;
  const std::int64_t blocks = n * row_blocks;
  std::vector<std::uint8_t> bytes = sgbench::noise_bytes(blocks * bb, 3);
  for (std::int64_t b = 0; b < blocks; ++b) {  // f16 1/64: 0x2400, little-endian
    bytes[static_cast<std::size_t>(b * bb)] = 0x00;
    bytes[static_cast<std::size_t>(b * bb + 1)] = 0x24;
  }
  const sg::Tensor w = sg::Tensor::empty({n, row_blocks * bb}, sg::DType::u8);
  w.device().copy_from_host(w.data_ptr(), bytes.data(), bytes.size());
  bytes = {};
  const sg::Tensor x = sg::Tensor::from_floats(noise(m * k, 1), {m, k});
  sg::Stream& stream = sg::current_stream();
  for (auto _ : state) {
    sg::Tensor out = sg::ops::linear_q(x, w, format);
    stream.synchronize();
    benchmark::DoNotOptimize(out);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(blocks * bb) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["Gblock/s"] = benchmark::Counter(static_cast<double>(blocks) * 1e-9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  sg::set_num_threads(sg::available_cores());
}
void linear_q_args(benchmark::internal::Benchmark* b) {
  for (const auto& nk : {std::vector<std::int64_t>{256, 2048},
                         {2048, 2048},
                         {5632, 2048},
                         {2048, 5632},
                         {262144, 2048}}) {
    for (std::int64_t m : {1, 4}) {
      for (std::int64_t t : {1, 2}) {
        for (std::int64_t f : {0, 1}) b->Args({m, nk[0], nk[1], t, f});
      }
    }
  }
}
BENCHMARK(BM_LinearQ)->Apply(linear_q_args)->ArgNames({"M", "N", "K", "T", "F"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
