// Products of more than 32 rows, and matmul(x, w^T) of more than 8, through
// oneDNN (Note [Matrix products through oneDNN] in src/kernels/cpu/onednn.h) against the naive
// double-precision references: linear's w[N, K] and matmul's row-major b[K, N] read in place, odd
// sizes (tails of every block and vector), row counts that cut into uneven blocks, a strided x (a
// slice of wider rows), the transposed weight of an nn.Linear reached through matmul, batched
// matmul, and 1, 2 and 3 compute threads (bitwise the same). Each case also runs with
// set_use_onednn(false) (our own tiles) against the same reference, and
// onednn_matmul_calls() says which path ran. In a build without oneDNN
// (SINKGRAPH_ONEDNN=OFF, the tsan preset) the oneDNN half is skipped.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"
#include "thread_count.h"

namespace {

using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::all_close;
using sgtest::Dims;
using sgtest::make;

// Sums of up to 700 f32 products of values in [-1, 1] against a double reference.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-4;

struct Shape {
  std::int64_t m, k, n;
};

// All past 32 rows: 33 (one block), 70 (two uneven blocks), 300 (eight).
const Shape kShapes[] = {{33, 64, 64}, {70, 13, 29}, {70, 700, 37}, {300, 96, 200}, {64, 1, 17}};

class OnednnMatmul : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !ops::onednn_built()) GTEST_SKIP() << "built without oneDNN";
    ops::set_use_onednn(GetParam());
  }
  void TearDown() override { ops::set_use_onednn(ops::onednn_built()); }

  // Runs `f` and checks that it took the path this instance is for. A
  // linear's products take oneDNN only where its kernels keep each row's
  // bits in any order of the rows (ops::onednn_linear_products()).
  template <typename F>
  Tensor on_path(F&& f, bool linear = false) {
    const std::uint64_t before = ops::onednn_matmul_calls();
    Tensor out = f();
    (void)out.to_floats();  // complete
    const std::uint64_t ran = ops::onednn_matmul_calls() - before;
    const bool onednn = GetParam() && (!linear || ops::onednn_linear_products());
    EXPECT_EQ(ran > 0, onednn) << "oneDNN products: " << ran;
    return out;
  }
};

TEST_P(OnednnMatmul, linear_matches_the_reference_at_1_2_and_3_threads) {
  const sgtest::ThreadCount restore;
  std::mt19937 rng(11);
  for (const Shape& s : kShapes) {
    const auto x = sgtest::random_floats(rng, s.m * s.k);
    const auto w = sgtest::random_floats(rng, s.n * s.k);
    const auto want = ref::linear(x, {s.m, s.k}, w, s.n);
    std::vector<float> first;
    for (const int threads : {1, 2, 3}) {
      sinkgraph::set_num_threads(threads);
      const auto got = on_path(
                           [&] {
                             return ops::linear(make(x, {s.m, s.k}), make(w, {s.n, s.k}));
                           },
                           /*linear=*/true)
                           .to_floats();
      EXPECT_TRUE(all_close(got, want, kRtol, kAtol))
          << s.m << "x" << s.k << " -> " << s.n << " at " << threads << " threads";
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(got, first) << s.m << "x" << s.k << " -> " << s.n << ": " << threads
                              << " threads differ from one";
      }
    }
  }
}

TEST_P(OnednnMatmul, linear_of_strided_rows_and_batched_leading_dims) {
  std::mt19937 rng(12);
  // x: the first 40 of 56 columns of each row ([3, 25, 56] sliced): ldx != k.
  const auto wide = sgtest::random_floats(rng, 3 * 25 * 56);
  const auto w = sgtest::random_floats(rng, 48 * 40);
  const Tensor xs = ops::slice(make(wide, {3, 25, 56}), 2, 0, 40, 1);
  std::vector<float> dense;
  for (std::int64_t r = 0; r < 75; ++r)
    dense.insert(dense.end(), wide.begin() + r * 56, wide.begin() + r * 56 + 40);
  const auto got = on_path(
                       [&] {
                         return ops::linear(xs, make(w, {48, 40}));
                       },
                       /*linear=*/true)
                       .to_floats();
  EXPECT_TRUE(all_close(got, ref::linear(dense, {3, 25, 40}, w, 48), kRtol, kAtol));
}

TEST_P(OnednnMatmul, matmul_with_a_row_major_b_and_with_a_transposed_weight) {
  std::mt19937 rng(13);
  for (const Shape& s : kShapes) {
    if (s.n < 16) continue;  // narrower products run OpenBLAS (linalg.cpp, product())
    const auto a = sgtest::random_floats(rng, s.m * s.k);
    const auto b = sgtest::random_floats(rng, s.k * s.n);
    const auto want = ref::matmul(a, {s.m, s.k}, b, {s.k, s.n});
    const auto got = on_path([&] {
                       return ops::matmul(make(a, {s.m, s.k}), make(b, {s.k, s.n}));
                     }).to_floats();
    EXPECT_TRUE(all_close(got, want, kRtol, kAtol)) << s.m << "x" << s.k << " @ " << s.n;
    // An nn.Linear through aten.t and mm: b is the transpose of w[N, K].
    std::vector<float> wt(static_cast<std::size_t>(s.n * s.k));
    for (std::int64_t i = 0; i < s.k; ++i)
      for (std::int64_t j = 0; j < s.n; ++j) wt[j * s.k + i] = b[i * s.n + j];
    const auto got_t =
        on_path([&] {
          return ops::matmul(make(a, {s.m, s.k}), ops::transpose(make(wt, {s.n, s.k}), 0, 1));
        }).to_floats();
    EXPECT_TRUE(all_close(got_t, want, kRtol, kAtol)) << s.m << "x" << s.k << " @ t " << s.n;
  }
}

// Note [A linear's rows and a matmul's] (linalg.cpp): matmul(x, w^T) takes
// oneDNN past 8 rows, cut into two blocks of columns where the product is
// large enough (odd widths: uneven halves), the same bits at any thread
// count; up to 8 rows it runs linear's row kernel, and linear itself keeps
// that kernel, and each row's result alone, up to 32 rows.
TEST_P(OnednnMatmul, a_transposed_weight_past_8_rows_and_linear_up_to_32) {
  const sgtest::ThreadCount restore;
  std::mt19937 rng(15);
  // {m, k, n}: one block; two blocks of 128 columns; two uneven ones (515, 516).
  const Shape shapes[] = {{9, 64, 40}, {32, 520, 256}, {16, 300, 1031}};
  for (const Shape& s : shapes) {
    const auto x = sgtest::random_floats(rng, s.m * s.k);
    const auto w = sgtest::random_floats(rng, s.n * s.k);
    const auto want = ref::linear(x, {s.m, s.k}, w, s.n);
    std::vector<float> first;
    for (const int threads : {1, 2, 3}) {
      sinkgraph::set_num_threads(threads);
      const auto got =
          on_path([&] {
            return ops::matmul(make(x, {s.m, s.k}), ops::transpose(make(w, {s.n, s.k}), 0, 1));
          }).to_floats();
      EXPECT_TRUE(all_close(got, want, kRtol, kAtol))
          << s.m << "x" << s.k << " @ t " << s.n << " at " << threads << " threads";
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(got, first) << s.m << "x" << s.k << " @ t " << s.n << ": " << threads
                              << " threads differ from one";
      }
    }
  }
  // Up to 8 rows through matmul, and up to 32 through linear: the row kernel.
  const std::int64_t k = 96, n = 80;
  const auto w = sgtest::random_floats(rng, n * k);
  for (const std::int64_t m : {std::int64_t{8}, std::int64_t{32}}) {
    const auto x = sgtest::random_floats(rng, m * k);
    const std::uint64_t before = ops::onednn_matmul_calls();
    const auto got = ops::linear(make(x, {m, k}), make(w, {n, k})).to_floats();
    const auto got_mm =
        m <= 8 ? ops::matmul(make(x, {m, k}), ops::transpose(make(w, {n, k}), 0, 1)).to_floats()
               : got;
    EXPECT_EQ(ops::onednn_matmul_calls(), before) << m << " rows";
    EXPECT_TRUE(all_close(got, ref::linear(x, {m, k}, w, n), kRtol, kAtol)) << m << " rows";
    EXPECT_EQ(got_mm, got) << m << " rows";
    // Batch invariance: the last row among the others is bitwise the row alone.
    const std::vector<float> last(x.end() - k, x.end());
    const auto alone = ops::linear(make(last, {1, k}), make(w, {n, k})).to_floats();
    EXPECT_EQ(std::vector<float>(got.end() - n, got.end()), alone) << m << " rows";
  }
}

// A 1x1 convolution's product, out[O, H*W] = w[O, C] @ x[C, H*W]: few rows,
// a wide row-major b, cut into two blocks of columns, each a strided part of
// b that brgemm declines, written in place at the output's row stride (Plan
// in onednn_matmul.cpp); odd widths give uneven halves. Equal to the
// reference, and the same bits at 1, 2 and 3 threads, through matmul and
// through conv2d (a zero bias).
TEST_P(OnednnMatmul, blocks_of_columns_of_a_row_major_b_in_place) {
  const sgtest::ThreadCount restore;
  std::mt19937 rng(16);
  const Shape shapes[] = {{96, 16, 3137}, {24, 48, 2001}};
  for (const Shape& s : shapes) {
    const auto a = sgtest::random_floats(rng, s.m * s.k);
    const auto b = sgtest::random_floats(rng, s.k * s.n);
    const auto want = ref::matmul(a, {s.m, s.k}, b, {s.k, s.n});
    std::vector<float> first;
    for (const int threads : {1, 2, 3}) {
      sinkgraph::set_num_threads(threads);
      const auto got = on_path([&] {
                         return ops::matmul(make(a, {s.m, s.k}), make(b, {s.k, s.n}));
                       }).to_floats();
      // The same product as a 1x1 convolution over a 1 x n image.
      const auto conv = on_path([&] {
                          return ops::conv2d(make(b, {1, s.k, 1, s.n}), make(a, {s.m, s.k, 1, 1}),
                                             make(std::vector<float>(s.m, 0.0F), {s.m}));
                        }).to_floats();
      EXPECT_TRUE(all_close(got, want, kRtol, kAtol))
          << s.m << "x" << s.k << " @ " << s.n << " at " << threads << " threads";
      EXPECT_EQ(conv, got) << s.m << "x" << s.k << " @ " << s.n << " as a convolution";
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(got, first) << s.m << "x" << s.k << " @ " << s.n << ": " << threads
                              << " threads differ from one";
      }
    }
  }
}

TEST_P(OnednnMatmul, batched_matmul_as_attention_runs_it) {
  std::mt19937 rng(14);
  // probabilities [8, 40, 40] @ v [8, 40, 16]
  const auto p = sgtest::random_floats(rng, 8 * 40 * 40);
  const auto v = sgtest::random_floats(rng, 8 * 40 * 16);
  const auto got = on_path([&] {
                     return ops::matmul(make(p, {8, 40, 40}), make(v, {8, 40, 16}));
                   }).to_floats();
  EXPECT_TRUE(all_close(got, ref::matmul(p, {8, 40, 40}, v, {8, 40, 16}), kRtol, kAtol));
}

// Several host threads, each on a stream of its own, queue products (the
// plan cache, the per-thread scratchpads and streams shared by them) while
// another thread changes the compute thread count; then a stream is
// destroyed with products still queued. Every result equals the one-thread
// result bit for bit.
TEST_P(OnednnMatmul, streams_on_several_threads_and_a_stream_destroyed_with_products_queued) {
  const sgtest::ThreadCount restore;
  std::mt19937 rng(15);
  const auto x = sgtest::random_floats(rng, 70 * 96);
  const auto w = sgtest::random_floats(rng, 130 * 96);
  // A matmul with a row-major b[96, 130]: oneDNN's path on every ISA (a
  // linear's products keep the tiles below AVX-512).
  std::vector<float> b(w.size());
  for (std::int64_t n = 0; n < 130; ++n)
    for (std::int64_t k = 0; k < 96; ++k) b[k * 130 + n] = w[n * 96 + k];
  const Tensor tx = make(x, {70, 96}), tw = make(b, {96, 130});
  sinkgraph::set_num_threads(1);
  const std::vector<float> want = on_path([&] { return ops::matmul(tx, tw); }).to_floats();
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) {
    users.emplace_back([&] {
      auto stream = sinkgraph::cpu().create_stream();
      const sinkgraph::StreamGuard guard(*stream);
      for (int round = 0; round < 10; ++round) {
        std::vector<Tensor> queued;
        for (int i = 0; i < 6; ++i) queued.push_back(ops::matmul(tx, tw));  // not waited
        for (const Tensor& t : queued) {
          if (t.to_floats() != want) wrong.fetch_add(1);
        }
      }
    });
  }
  std::thread resizer([&] {
    for (int i = 0; !done.load(); ++i) {
      sinkgraph::set_num_threads(1 + i % 3);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  for (std::thread& t : users) t.join();
  done.store(true);
  resizer.join();
  EXPECT_EQ(wrong.load(), 0);

  std::vector<Tensor> kept;
  {
    auto stream = sinkgraph::cpu().create_stream();
    const sinkgraph::StreamGuard guard(*stream);
    for (int i = 0; i < 6; ++i) kept.push_back(ops::matmul(tx, tw));
  }  // destroyed with products queued: it finishes them first
  for (const Tensor& t : kept) EXPECT_EQ(t.to_floats(), want);
}

INSTANTIATE_TEST_SUITE_P(ops, OnednnMatmul, testing::Bool(), [](const auto& p) {
  return std::string(p.param ? "onednn" : "own_kernels");
});

}  // namespace
