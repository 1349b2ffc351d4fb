// The compute threads (Note [Compute threads], Note [Splitting a kernel's
// work]): every kernel that splits its work, at 1, 2 and 3 threads, against
// its naive reference (sgtest::ref) and bitwise against itself at one thread
// (the parts are static, so the thread count must not change a bit). Sizes
// are chosen above each kernel's work threshold, so the parts really run on
// several threads; the tsan preset runs this file too. Then the pool under
// use: streams on several host threads while the thread count changes, and a
// stream destroyed with parallel kernels still queued.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kernels/counter_rng.h"  // internal: the tests build with src/ on the include path
#include "reference.h"
#include "runtime/spin.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "thread_count.h"

namespace {

namespace sg = sinkgraph;
namespace ref = sgtest::ref;
using ref::Dims;
using sgtest::make;

using sgtest::ThreadCount;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Allocates and frees an f32 block of n NaNs, so that the next output of
// that size, served from the allocator's cache, starts as NaN.
void poison(std::size_t n) {
  (void)sg::Tensor::from_floats(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()),
                                {static_cast<std::int64_t>(n)});
}

// One kernel's case: its result from the library and from the reference.
struct Case {
  std::string name;
  std::function<std::vector<float>()> run;
  std::vector<float> want;
  double rtol, atol;
};

std::vector<Case> cases() {
  std::mt19937 rng(20261201);
  const auto rnd = [&](std::int64_t n) { return sgtest::random_floats(rng, n); };
  std::vector<Case> out;

  const std::int64_t flat = 90000;  // elementwise: ~3 parts of kMinParallelWork
  const auto a = rnd(flat), b = rnd(flat);
  const sg::Tensor ta = make(a, {300, 300}), tb = make(b, {300, 300});
  std::vector<float> add(a.size()), silu(a.size()), silu_mul(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    add[i] = a[i] + b[i];
    silu[i] = static_cast<float>(ref::silu(a[i]));
    silu_mul[i] = static_cast<float>(ref::silu(a[i]) * b[i]);
  }
  out.push_back({"add", [=] { return sg::ops::add(ta, tb).to_floats(); }, add, 0, 0});
  out.push_back({"silu", [=] { return sg::ops::silu(ta).to_floats(); }, silu, 1e-5, 1e-6});
  out.push_back(
      {"silu_mul", [=] { return sg::ops::silu_mul(ta, tb).to_floats(); }, silu_mul, 1e-5, 1e-6});

  // Matrix-vector products: the cache-resident four-row walk (384 x 256) and
  // the streaming one (3000 x 256, 3 MB); then a matrix product (5 rows).
  for (const Dims& shape : {Dims{384, 256}, Dims{3000, 256}}) {
    const auto w = rnd(shape[0] * shape[1]);
    const auto x = rnd(shape[1]);
    const sg::Tensor tw = make(w, shape), tx = make(x, {1, shape[1]});
    out.push_back({"linear " + sgtest::str(shape),
                   [=] { return sg::ops::linear(tx, tw).to_floats(); },
                   ref::linear(x, {1, shape[1]}, w, shape[0]), 1e-4, 1e-5});
  }
  {
    const auto w = rnd(384 * 256), x = rnd(5 * 256);
    const sg::Tensor tw = make(w, {384, 256}), tx = make(x, {5, 256});
    out.push_back({"linear [5,256]x[384,256]", [=] { return sg::ops::linear(tx, tw).to_floats(); },
                   ref::linear(x, {5, 256}, w, 384), 1e-4, 1e-5});
  }
  // A prefill's product: more rows than one chunk of x (kRowChunk, 32), on a
  // cache-resident and a streaming weight; and the same as the PyTorch
  // front-end traces an nn.Linear, matmul(x, w^T), which takes linear's kernel.
  for (const Dims& shape : {Dims{384, 256}, Dims{1500, 256}}) {
    const std::int64_t m = 70;
    const auto w = rnd(shape[0] * shape[1]), x = rnd(m * shape[1]);
    const sg::Tensor tw = make(w, shape), tx = make(x, {m, shape[1]});
    const auto want = ref::linear(x, {m, shape[1]}, w, shape[0]);
    out.push_back({"linear [70,256]x" + sgtest::str(shape),
                   [=] { return sg::ops::linear(tx, tw).to_floats(); }, want, 1e-4, 1e-5});
    out.push_back({"matmul [70,256]x" + sgtest::str(shape) + "^T",
                   [=] { return sg::ops::matmul(tx, sg::ops::transpose(tw, 0, 1)).to_floats(); },
                   want, 1e-4, 1e-5});
  }
  // matmul with a row-major b[K, N] (attention's probabilities @ v): the
  // tiled kernel at any number of rows, split by columns.
  for (const std::int64_t m : {1, 5, 70}) {
    const std::int64_t kk = 700, nn = 300;  // two blocks of K, a partial block of columns
    const auto w = rnd(nn * kk), x = rnd(m * kk);
    std::vector<float> wt(w.size());  // w^T, row-major [K, N]
    for (std::int64_t r = 0; r < nn; ++r) {
      for (std::int64_t c = 0; c < kk; ++c) wt[c * nn + r] = w[r * kk + c];
    }
    const sg::Tensor twt = make(wt, {kk, nn}), tx = make(x, {m, kk});
    out.push_back({"matmul [" + std::to_string(m) + ",700]x[700,300]",
                   [=] { return sg::ops::matmul(tx, twt).to_floats(); },
                   ref::linear(x, {m, kk}, w, nn), 1e-4, 1e-5});
  }

  // Decode attention (one query row) and a prefill block (four rows), by heads.
  for (const std::int64_t t_len : {1, 4}) {
    const std::int64_t hq = 16, hkv = 4, d = 64, cache = 700, seq = 600;
    const auto q = rnd(t_len * hq * d), k = rnd(cache * hkv * d), v = rnd(cache * hkv * d);
    const sg::Tensor tq = make(q, {t_len, hq, d}), tk = make(k, {cache, hkv, d}),
                     tv = make(v, {cache, hkv, d});
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    out.push_back({"attention T=" + std::to_string(t_len),
                   [=] { return sg::ops::attention(tq, tk, tv, seq).to_floats(); },
                   ref::attention(q, k, v, t_len, hq, hkv, d, seq, scale), 1e-4, 1e-5});
  }
  {
    // Unmasked multi-head attention: every query row of every head a task.
    const std::int64_t batch = 2, len = 8, e = 256, heads = 4, d = e / heads;
    const auto q = rnd(batch * len * e), k = rnd(batch * len * e), v = rnd(batch * len * e);
    const sg::Tensor tq = make(q, {batch, len, e}), tk = make(k, {batch, len, e}),
                     tv = make(v, {batch, len, e});
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    // The reference: causal attention with seq_len = T sees everything for
    // the last row only, so compute each row with T = 1 over the full cache.
    std::vector<float> want(q.size());
    for (std::int64_t bi = 0; bi < batch; ++bi) {
      for (std::int64_t h = 0; h < heads; ++h) {
        std::vector<float> kh(static_cast<std::size_t>(len * d)), vh(kh.size());
        for (std::int64_t j = 0; j < len; ++j) {
          for (std::int64_t c = 0; c < d; ++c) {
            const auto src = static_cast<std::size_t>((bi * len + j) * e + h * d + c);
            kh[static_cast<std::size_t>(j * d + c)] = k[src];
            vh[static_cast<std::size_t>(j * d + c)] = v[src];
          }
        }
        for (std::int64_t i = 0; i < len; ++i) {
          std::vector<float> qi(static_cast<std::size_t>(d));
          for (std::int64_t c = 0; c < d; ++c)
            qi[static_cast<std::size_t>(c)] =
                q[static_cast<std::size_t>((bi * len + i) * e + h * d + c)];
          const auto row = ref::attention(qi, kh, vh, 1, 1, 1, d, len, scale);
          for (std::int64_t c = 0; c < d; ++c)
            want[static_cast<std::size_t>((bi * len + i) * e + h * d + c)] =
                row[static_cast<std::size_t>(c)];
        }
      }
    }
    out.push_back({"sdpa", [=] { return sg::ops::sdpa(tq, tk, tv, heads, scale).to_floats(); },
                   want, 1e-4, 1e-5});
  }

  // Rows: norms and softmax over 64 rows of 2048.
  {
    const std::int64_t rows = 64, n = 2048;
    const auto x = rnd(rows * n), w = rnd(n), bias = rnd(n);
    const sg::Tensor tx = make(x, {rows, n}), tw = make(w, {n}), tbias = make(bias, {n});
    out.push_back({"softmax", [=] { return sg::ops::softmax(tx).to_floats(); }, ref::softmax(x, n),
                   1e-5, 1e-7});
    out.push_back({"rms_norm", [=] { return sg::ops::rms_norm(tx, tw, 1e-5).to_floats(); },
                   ref::rms_norm(x, w, 1e-5), 1e-5, 1e-6});
    out.push_back({"layer_norm",
                   [=] { return sg::ops::layer_norm(tx, tw, tbias, 1e-5).to_floats(); },
                   ref::layer_norm(x, w, bias, 1e-5), 1e-4, 1e-5});
    out.push_back({"mean", [=] { return sg::ops::mean(tx, {1}).to_floats(); },
                   ref::mean(x, {rows, n}, {false, true}), 1e-5, 1e-6});
  }
  // Attention weights averaged over their heads (nn.MultiheadAttention's
  // need_weights): three kept dims, outputs in several parallel chunks, each
  // starting its walk over the kept dims mid-way; contiguous and permuted.
  {
    const Dims shape = {2, 4, 48, 130};
    const auto x = rnd(ref::numel(shape));
    const sg::Tensor tx = make(x, shape);
    const sg::Tensor tp =
        make(ref::permute(x, shape, {0, 2, 3, 1}), {2, 48, 130, 4}).permute({0, 3, 1, 2});
    const auto want = ref::mean(x, shape, {false, true, false, false});
    out.push_back(
        {"mean over heads", [=] { return sg::ops::mean(tx, {1}).to_floats(); }, want, 1e-5, 1e-6});
    out.push_back({"mean over heads, permuted", [=] { return sg::ops::mean(tp, {1}).to_floats(); },
                   want, 1e-5, 1e-6});
  }

  // argmax of one long row (by blocks, then merged): the maximum planted
  // twice, so the first index must win across block boundaries; then NaNs,
  // of which the first wins, as in torch.argmax, wherever the blocks fall.
  {
    const std::int64_t n = 200000;
    auto x = rnd(n);
    x[150001] = 7.0F;
    x[170000] = 7.0F;
    const sg::Tensor tx = make(x, {n});
    const auto want = ref::argmax(x, n);
    out.push_back({"argmax",
                   [=] {
                     const auto ids = sg::ops::argmax(tx).to_ints();
                     return std::vector<float>(ids.begin(), ids.end());
                   },
                   std::vector<float>(want.begin(), want.end()), 0, 0});
    x[163840] = std::numeric_limits<float>::quiet_NaN();  // a block's first element
    x[20000] = std::numeric_limits<float>::quiet_NaN();
    const sg::Tensor tn = make(x, {n});
    out.push_back({"argmax with NaN",
                   [=] {
                     const auto ids = sg::ops::argmax(tn).to_ints();
                     return std::vector<float>(ids.begin(), ids.end());
                   },
                   std::vector<float>{20000.0F}, 0, 0});
  }

  // sample of one long row (by blocks, then merged): a draw per offset.
  {
    const std::int64_t n = 100000;
    const auto x = sgtest::random_floats(rng, n, -4.0F, 4.0F);
    const sg::Tensor tx = make(x, {n});
    std::vector<float> want;
    for (std::uint64_t offset = 0; offset < 16; ++offset) {
      const double u = sg::kernels::counter_uniform(9, offset, 0);
      want.push_back(static_cast<float>(ref::sample(x, 1.0, u)));
    }
    out.push_back({"sample",
                   [=] {
                     std::vector<float> ids;
                     for (std::int64_t offset = 0; offset < 16; ++offset)
                       ids.push_back(
                           static_cast<float>(sg::ops::sample(tx, 1.0, 9, offset).to_ints()[0]));
                     return ids;
                   },
                   want, 0, 0});
  }
  return out;
}

TEST(ops_threads, every_split_kernel_matches_its_reference_and_itself_at_1_2_and_3_threads) {
  const ThreadCount restore;
  for (const Case& c : cases()) {
    std::vector<float> one;
    for (const int threads : {1, 2, 3}) {
      sg::set_num_threads(threads);
      // The caching allocator would hand the output the block the previous
      // run filled with right answers, hiding a part that never ran: fill
      // that block with NaN first.
      poison(c.want.size());
      const std::vector<float> got = c.run();
      EXPECT_TRUE(sgtest::all_close(got, c.want, c.rtol, c.atol)) << c.name << " at " << threads;
      if (threads == 1) {
        one = got;
      } else {
        EXPECT_TRUE(bitwise_equal(got, one))
            << c.name << ": " << threads << " threads differ from one in some bit";
      }
    }
  }
}

// Batch invariance: each row of a linear over M rows is bitwise the row
// computed alone up to 32 rows (Note [Rows of a linear]), and past 32 rows (a
// prefill's product, Note [Products of many rows]) bitwise the same row
// among other rows in another order, for cache-resident, streaming and
// odd-sized weights (10 x 13: a partial block of columns and lanes; 200 x
// 700: more than one block of K), at any thread count.
//
// Up to 32 rows the bits rest on every multiply-add of vec::dot_rows being
// fused the same way in each row-count copy (Note [Explicit fma]); the 200 x
// 700 case (a lane step and a tail after the 16-wide loop) is the one that
// caught a copy compiled differently when the lane loops still left the
// choice to GCC (12, at -O2 with ASan+UBSan).
TEST(ops_threads, a_linear_row_is_the_same_alone_or_among_other_rows) {
  const ThreadCount restore;
  std::mt19937 rng(7);
  for (const Dims& shape : {Dims{384, 256}, Dims{1500, 256}, Dims{10, 13}, Dims{200, 700}}) {
    const auto w = sgtest::random_floats(rng, shape[0] * shape[1]);
    const sg::Tensor tw = make(w, shape);
    const auto row_of = [&](const std::vector<float>& out, std::int64_t i) {
      return std::vector<float>(out.begin() + i * shape[0], out.begin() + (i + 1) * shape[0]);
    };
    for (const std::int64_t m : {2, 3, 5, 16, 32, 33, 70}) {
      const auto x = sgtest::random_floats(rng, m * shape[1]);
      const sg::Tensor tx = make(x, {m, shape[1]});
      std::vector<float> reversed_x;  // x's rows last to first
      for (std::int64_t i = m - 1; i >= 0; --i)
        reversed_x.insert(reversed_x.end(), x.begin() + i * shape[1],
                          x.begin() + (i + 1) * shape[1]);
      const sg::Tensor treversed = make(reversed_x, {m, shape[1]});
      for (const int threads : {1, 2, 3}) {
        sg::set_num_threads(threads);
        const std::vector<float> all = sg::ops::linear(tx, tw).to_floats();
        EXPECT_TRUE(sgtest::all_close(all, ref::linear(x, {m, shape[1]}, w, shape[0]), 1e-4, 1e-5))
            << sgtest::str(shape) << " m=" << m;
        const std::vector<float> reversed = sg::ops::linear(treversed, tw).to_floats();
        for (std::int64_t i = 0; i < m; ++i) {
          const std::vector<float> xi(x.begin() + i * shape[1], x.begin() + (i + 1) * shape[1]);
          const std::vector<float> alone = sg::ops::linear(make(xi, {1, shape[1]}), tw).to_floats();
          const std::vector<float> row = row_of(all, i);
          EXPECT_TRUE(bitwise_equal(row, row_of(reversed, m - 1 - i)))
              << sgtest::str(shape) << " m=" << m << " row " << i << " at " << threads
              << " threads, reversed";
          if (m <= 32) {
            EXPECT_TRUE(bitwise_equal(row, alone)) << sgtest::str(shape) << " m=" << m << " row "
                                                   << i << " at " << threads << " threads";
          }
        }
      }
    }
  }
}

TEST(ops_threads, the_thread_count_is_checked_and_defaults_to_the_available_cores) {
  const ThreadCount restore;
  EXPECT_GE(sg::available_cores(), 1);
  EXPECT_THROW(sg::set_num_threads(0), sg::Error);
  EXPECT_THROW(sg::set_num_threads(sg::kMaxThreads + 1), sg::Error);
  sg::set_num_threads(sg::kMaxThreads);
  EXPECT_EQ(sg::num_threads(), sg::kMaxThreads);
}

// A matrix-vector product that splits at any thread count: 3000 x 256 (3 MB).
struct BigLinear {
  explicit BigLinear(std::uint32_t seed) : rng(seed) {}
  std::mt19937 rng;
  std::vector<float> w = sgtest::random_floats(rng, 3000 * 256),
                     x = sgtest::random_floats(rng, 256);
  sg::Tensor tw = make(w, {3000, 256}), tx = make(x, {1, 256});
};

// Several host threads, each on a stream of its own, queue parallel kernels
// while another thread keeps changing the thread count: the pool stops and
// starts helpers between jobs, a busy pool makes a kernel run its parts
// alone, and every result still equals the one-thread result bit for bit.
TEST(ops_threads, streams_on_several_threads_share_the_pool_while_its_size_changes) {
  const ThreadCount restore;
  const BigLinear big(5);
  const sg::Tensor &tw = big.tw, &tx = big.tx;
  sg::set_num_threads(1);
  const std::vector<float> want = sg::ops::linear(tx, tw).to_floats();
  sg::set_num_threads(2);

  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) {
    users.emplace_back([&] {
      auto stream = sg::cpu().create_stream();
      const sg::StreamGuard guard(*stream);
      for (int round = 0; round < 15; ++round) {
        std::vector<sg::Tensor> queued;
        for (int i = 0; i < 8; ++i)
          queued.push_back(sg::ops::linear(tx, tw));  // queued, not waited
        for (const sg::Tensor& t : queued) {
          if (!bitwise_equal(t.to_floats(), want)) wrong.fetch_add(1);
        }
      }
    });
  }
  std::thread resizer([&] {
    for (int i = 0; !done.load(); ++i) {
      sg::set_num_threads(1 + i % 3);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  for (std::thread& t : users) t.join();
  done.store(true);
  resizer.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A stream destroyed while parallel kernels are still queued on it finishes
// them first (its destructor drains the queue); their results are right.
TEST(ops_threads, a_stream_destroyed_with_parallel_kernels_queued_finishes_them) {
  const ThreadCount restore;
  const BigLinear big(6);
  const sg::Tensor &tw = big.tw, &tx = big.tx;
  sg::set_num_threads(3);
  const auto want = ref::linear(big.x, {1, 256}, big.w, 3000);
  sg::current_stream().synchronize();  // the inputs' copies, before another stream reads them
  std::vector<sg::Tensor> results;
  {
    auto stream = sg::cpu().create_stream();
    const sg::StreamGuard guard(*stream);
    for (int i = 0; i < 40; ++i) results.push_back(sg::ops::linear(tx, tw));
  }  // destroyed here, with work queued
  for (const sg::Tensor& t : results)
    EXPECT_TRUE(sgtest::all_close(t.to_floats(), want, 1e-4, 1e-5));
}

// Note [Spin, yield, park]: a host waiter's spin is cut short only while a
// compute helper is awake. The rule is the header's; the counter here is this
// binary's own copy (the library keeps its counter hidden), set by hand as a
// helper sets the library's.
TEST(ops_threads, a_waiters_spin_is_cut_short_only_beside_awake_helpers) {
  namespace rt = sg::runtime;
  using clock = std::chrono::steady_clock;
  const auto never = [] { return false; };
  const rt::SpinLimit limit{/*ns=*/200'000'000, /*ns_beside_helpers=*/50'000};
  ASSERT_EQ(rt::g_awake_helpers.load(), 0);
  auto start = clock::now();
  EXPECT_FALSE(rt::spin_until(limit, never));
  EXPECT_GE(clock::now() - start, std::chrono::milliseconds(200));

  rt::g_awake_helpers.fetch_add(1);  // as a helper spinning for its next part
  start = clock::now();
  EXPECT_FALSE(rt::spin_until(limit, never));
  EXPECT_LT(clock::now() - start, std::chrono::milliseconds(200));
  rt::g_awake_helpers.fetch_sub(1);
}

}  // namespace
