// max-autotune's code generation (Note [Generated regions]): every operator
// with an emitter, run as generated code inside a captured graph, against the
// same function run eagerly through the kernels; updatable scalars patched per
// replay; the compile cache's cold, warm and corrupt paths; and the fallback
// when no compiler is available.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../trace/models.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/device.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"
#include "sinkgraph/log.h"
#include "sinkgraph/ops.h"

namespace {

namespace sg = sinkgraph;
namespace fs = std::filesystem;
using Fn = std::function<std::vector<sg::Tensor>(std::span<const sg::Arg>)>;
using Args = std::vector<sg::Arg>;

// A fresh cache folder per test (removed afterwards).
class CodegenTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("sg-codegen-test-" + std::to_string(::getpid()) + "-" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  [[nodiscard]] sg::CompilerConfig config() const {
    sg::CompilerConfig c;
    c.mode = sg::Mode::max_autotune;
    c.cache_dir = dir_.string();
    return c;
  }
  // Runs `fn` compiled (max-autotune, generated code) and eagerly; calls[k]
  // gives call k's arguments for each (the same tensors, unless the function
  // writes its inputs in place: then each side has its own).
  std::shared_ptr<sg::CompiledFunction> check(const Fn& fn,
                                              const std::vector<std::pair<Args, Args>>& calls,
                                              float tol, const sg::TraceOptions& options = {}) {
    auto compiled = sg::compile(fn, sg::get_backend(config()), options);
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const std::vector<sg::Tensor> got = (*compiled)(calls[k].first);
      const std::vector<sg::Tensor> want = fn(calls[k].second);
      EXPECT_EQ(got.size(), want.size());
      for (std::size_t o = 0; o < got.size() && o < want.size(); ++o) {
        const std::vector<float> g = got[o].to_floats(), w = want[o].to_floats();
        EXPECT_EQ(g.size(), w.size());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
          if (std::fabs(g[i] - w[i]) > tol * (1.0F + std::fabs(w[i])) && bad++ < 3) {
            ADD_FAILURE() << "call " << k << ", output " << o << ", element " << i << ": " << g[i]
                          << " vs " << w[i];
          }
        }
      }
    }
    return compiled;
  }
  std::shared_ptr<sg::CompiledFunction> check(const Fn& fn, const std::vector<Args>& calls,
                                              float tol) {
    std::vector<std::pair<Args, Args>> both;
    for (const Args& a : calls) both.emplace_back(a, a);
    return check(fn, both, tol);
  }
  fs::path dir_;
};

sg::Tensor rnd(const sg::Shape& shape, std::uint32_t seed, float scale = 1.0F) {
  return sgtest::random_tensor(shape, seed, scale);
}

TEST_F(CodegenTest, pointwise_operators_with_broadcasting) {
  const Fn fn = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    namespace o = sg::ops;
    const auto& x = std::get<sg::Tensor>(a[0]);
    const auto& b = std::get<sg::Tensor>(a[1]);  // [8]: broadcast over rows
    sg::Tensor y = o::add(x, b);
    y = o::mul(o::silu(y), o::sigmoid(x));
    y = o::sub(o::tanh(y), o::gelu(b));
    y = o::div(o::exp(o::neg(o::relu(y))), o::add_scalar(o::mul(b, b), 1.0));
    y = o::add(o::hardswish(y), o::hardsigmoid(o::mul_scalar(x, 0.5)));
    return {o::add(o::sqrt(o::add_scalar(o::mul(y, y), 1e-3)),
                   o::rsqrt(o::add_scalar(o::exp(x), 1.0)))};
  };
  auto c = check(fn, {{rnd({3, 8}, 1), rnd({8}, 2)}, {rnd({3, 8}, 3), rnd({8}, 4)}}, 2e-5F);
  EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
}

TEST_F(CodegenTest, norms_linear_softmax_and_silu_mul) {
  const sg::Tensor w = rnd({16}, 5), w1 = rnd({24, 16}, 6), w2 = rnd({16, 24}, 7);
  const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    namespace o = sg::ops;
    const auto& x = std::get<sg::Tensor>(a[0]);
    const sg::Tensor h = o::rms_norm(x, w, 1e-5);
    const sg::Tensor up = o::linear(h, w1);
    const sg::Tensor mlp = o::linear(o::silu_mul(up, o::sigmoid(up)), w2);
    return {o::softmax(o::add(mlp, x)), o::add_rms_norm(mlp, x, w, 1e-6)};
  };
  auto c = check(fn, {{rnd({4, 16}, 8)}, {rnd({4, 16}, 9)}}, 1e-4F);
  EXPECT_GE(c->counters().codegen_kernels, 1);
}

// A weight past kMaxGeneratedWeightBytes (256 KiB) streams from memory, where
// OpenBLAS's kernel reads it faster: that linear keeps its kernel, and the
// operators on each side of it become two generated regions.
TEST_F(CodegenTest, a_linear_with_a_large_weight_runs_its_kernel_between_regions) {
  const sg::Tensor norm = rnd({256}, 5), big = rnd({512, 256}, 6);  // 512 KiB
  const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    namespace o = sg::ops;
    const sg::Tensor h = o::rms_norm(std::get<sg::Tensor>(a[0]), norm, 1e-5);
    return {o::silu(o::linear(h, big))};
  };
  auto c = check(fn, {{rnd({1, 256}, 8)}, {rnd({1, 256}, 9)}}, 1e-4F);
  EXPECT_EQ(c->counters().codegen_kernels, 2) << c->explain(true);
  EXPECT_NE(c->explain(true).find("] linear(f32[1,256]"), std::string::npos) << c->explain(true);
}

// rope's position, attention's seq_len and index_copy_'s row are updatable:
// one capture serves every position, each replay patching the region's slots.
TEST_F(CodegenTest, decode_attention_block_updatable_scalars_across_replays) {
  const sgtest::AttentionBlock block;
  // Each side keeps its own caches, written in place call after call.
  const sg::Tensor k1 = rnd({16, 4, 8}, 10), v1 = rnd({16, 4, 8}, 11);
  const sg::Tensor k2 = rnd({16, 4, 8}, 10), v2 = rnd({16, 4, 8}, 11);
  std::vector<std::pair<Args, Args>> calls;
  for (int pos = 0; pos < 6; ++pos) {
    const sg::Tensor x = rnd({1, 32}, 20 + static_cast<std::uint32_t>(pos));
    calls.emplace_back(Args{x, sg::SymInt(pos), k1, v1}, Args{x, sg::SymInt(pos), k2, v2});
  }
  auto c = check(std::cref(block), calls, 1e-4F);
  EXPECT_EQ(c->counters().captured, 1);  // positions never re-capture
  EXPECT_GE(c->counters().codegen_kernels, 1);
}

// attention's weighted sum of v rows runs in blocks of up to 32 columns, in
// vectors of eight where a block's width allows and in a scalar loop where
// it does not: head sizes 12 (one scalar block), 40 (a block of 32, one of
// 8) and 36 (32 in vectors, a 4-wide scalar tail), two query heads per kv
// head, two query rows, agree with the kernel.
TEST_F(CodegenTest, attention_head_sizes_between_and_past_vector_blocks) {
  for (const std::int64_t d : {12, 40, 36}) {
    SCOPED_TRACE(d);
    const Fn fn = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      return {sg::ops::attention(std::get<sg::Tensor>(a[0]), std::get<sg::Tensor>(a[1]),
                                 std::get<sg::Tensor>(a[2]), std::get<sg::SymInt>(a[3]), 0.3)};
    };
    const auto seed = static_cast<std::uint32_t>(d);
    const Args call{rnd({2, 4, d}, seed), rnd({24, 2, d}, seed + 1), rnd({24, 2, d}, seed + 2),
                    sg::SymInt(19)};
    auto c = check(fn, {call}, 1e-5F);
    EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
  }
}

TEST_F(CodegenTest, embedding_rope_styles_and_a_run_time_range_error) {
  const sg::Tensor table = rnd({10, 8}, 12);
  for (const auto style : {sg::ops::RopeStyle::interleaved, sg::ops::RopeStyle::half}) {
    const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      const auto& ids = std::get<sg::Tensor>(a[0]);
      const sg::SymInt& pos = std::get<sg::SymInt>(a[1]);
      const sg::Tensor e = sg::ops::reshape(sg::ops::embedding(table, ids), {3, 2, 4});
      return {sg::ops::rope(e, pos, 10000.0, style)};
    };
    auto c = check(fn,
                   {{sg::Tensor::from_ints({1, 2, 3}, {3}), sg::SymInt(0)},
                    {sg::Tensor::from_ints({9, 0, 4}, {3}), sg::SymInt(5)}},
                   1e-5F);
    // An id only the run can check fails the region as the kernel would.
    try {
      (void)(*c)({sg::Tensor::from_ints({1, 12, 3}, {3}), sg::SymInt(1)})[0].to_floats();
      ADD_FAILURE() << "expected a kernel error";
    } catch (const sg::Error& e) {
      EXPECT_NE(std::string(e.what()).find("token id 12 is out of range"), std::string::npos)
          << e.what();
    }
  }
}

// Rows of ggml blocks (Note [Quantized weights]): random f16 scales in
// [-0.05, 0.05], random bytes.
sg::Tensor quantized(sg::ops::QuantFormat f, std::int64_t rows, std::int64_t k,
                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(-0.05F, 0.05F);
  const std::int64_t bb = sg::ops::quant_block_bytes(f);
  std::vector<std::int64_t> bytes;
  for (std::int64_t b = 0; b < rows * k / 32; ++b) {
    const std::uint16_t d = sg::f32_to_f16(scale(rng));
    bytes.push_back(d & 0xFF);
    bytes.push_back(d >> 8);
    for (std::int64_t j = 2; j < bb; ++j) bytes.push_back(static_cast<std::int64_t>(rng() % 256));
  }
  return sg::Tensor::from_ints(bytes, {rows, k / 32 * bb}, sg::DType::u8);
}

// linear_q and embedding_q generated in one region with their neighbours,
// for 1 to 4 rows of x, an output count that is not a multiple of anything,
// one large enough to split across the compute threads, and both formats; a quantized weight too
// large for the caches keeps its kernel, as an f32 one does.
TEST_F(CodegenTest, quantized_linear_and_embedding_in_one_region) {
  for (const auto f : {sg::ops::QuantFormat::q8_0, sg::ops::QuantFormat::q4_0}) {
    SCOPED_TRACE(sg::ops::quant_format_name(f));
    const sg::Tensor table = quantized(f, 11, 64, 1), w1 = quantized(f, 37, 64, 2);
    const sg::Tensor w2 = quantized(f, 64, 96, 3), norm = rnd({64}, 4);
    const sg::Tensor wide = quantized(f, 2048, 64, 8);  // rows enough to split across threads
    const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      namespace o = sg::ops;
      const sg::Tensor e = o::embedding_q(table, std::get<sg::Tensor>(a[0]), f);
      const sg::Tensor h = o::linear_q(o::rms_norm(e, norm, 1e-5), w1, f);  // [rows, 37]
      const sg::Tensor x = std::get<sg::Tensor>(a[1]);                      // [rows, 96]
      return {o::silu(h), o::add(o::linear_q(x, w2, f), e), o::linear_q(e, wide, f)};
    };
    for (const std::int64_t rows : {1, 2, 3, 4}) {
      SCOPED_TRACE(rows);
      std::vector<std::int64_t> ids;
      for (std::int64_t r = 0; r < rows; ++r) ids.push_back((r * 7 + 3) % 11);
      const auto seed = static_cast<std::uint32_t>(rows);
      auto c = check(fn, {{sg::Tensor::from_ints(ids, {rows}), rnd({rows, 96}, seed)}}, 1e-5F);
      EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
      EXPECT_EQ(c->explain(true).find("] linear_q("), std::string::npos) << c->explain(true);
    }
    const sg::Tensor big = quantized(f, 4096, 256, 5);  // 1.1 or 0.6 MiB of blocks
    const Fn streamed = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      return {sg::ops::silu(sg::ops::linear_q(std::get<sg::Tensor>(a[0]), big, f))};
    };
    auto c = check(streamed, {{rnd({1, 256}, 6)}}, 1e-5F);
    EXPECT_NE(c->explain(true).find("] linear_q(f32[1,256]"), std::string::npos)
        << c->explain(true);
  }
}

// A generated linear_q alone is the kernel's bits (Note [Activations
// quantized per block]: the prelude's sg_quantize32 and sg_dot_q are the
// kernel's quantizer and sums), for an even and an odd number of blocks and
// 1 to 4 rows of x.
TEST_F(CodegenTest, generated_quantized_products_are_the_kernels_bits) {
  for (const auto f : {sg::ops::QuantFormat::q8_0, sg::ops::QuantFormat::q4_0}) {
    for (const std::int64_t k : {96, 128}) {
      SCOPED_TRACE(std::string(sg::ops::quant_format_name(f)) + ", k " + std::to_string(k));
      const sg::Tensor w = quantized(f, 45, k, 31);
      const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
        return {sg::ops::linear_q(std::get<sg::Tensor>(a[0]), w, f)};
      };
      for (const std::int64_t rows : {1, 2, 3, 4}) {
        auto c = check(fn, {{rnd({rows, k}, static_cast<std::uint32_t>(rows + k))}}, 0.0F);
        EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
      }
      // The quantizer's edges: a block below the tiny bound (zeros), and
      // one whose values lie halfway between two steps (rounded to even).
      std::vector<float> edges = rnd({1, k}, 77).to_floats();
      for (std::int64_t j = 32; j < 64; ++j) edges[j] = 1e-39F * static_cast<float>(j - 40);
      for (std::int64_t j = 64; j < 96; ++j) edges[j] = static_cast<float>(j % 9) - 4.5F;
      edges[64] = 127.0F;
      auto c = check(fn, {{sg::Tensor::from_floats(edges, {1, k})}}, 0.0F);
      EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
    }
  }
}

// Every f16 bit pattern as a Q8_0 block's scale, times q = 1: the generated
// decoding (the prelude's sg_f16: normal, subnormal, zero, inf, NaN, both
// signs) gives the library's f16_to_f32 bitwise, NaN for NaN.
TEST_F(CodegenTest, every_f16_scale_decodes_as_the_library_does) {
  constexpr std::int64_t kPatterns = 65536;
  std::vector<std::int64_t> bytes;
  for (std::int64_t h = 0; h < kPatterns; ++h) {
    bytes.push_back(h & 0xFF);
    bytes.push_back(h >> 8);
    for (int j = 0; j < 32; ++j) bytes.push_back(j == 0 ? 1 : 0);
  }
  const sg::Tensor table = sg::Tensor::from_ints(bytes, {kPatterns, 34}, sg::DType::u8);
  std::vector<std::int64_t> ids(kPatterns);
  for (std::int64_t i = 0; i < kPatterns; ++i) ids[static_cast<std::size_t>(i)] = i;
  const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::embedding_q(table, std::get<sg::Tensor>(a[0]), sg::ops::QuantFormat::q8_0)};
  };
  auto c = sg::compile(fn, sg::get_backend(config()));
  const std::vector<float> got = (*c)({sg::Tensor::from_ints(ids, {kPatterns})})[0].to_floats();
  EXPECT_EQ(c->counters().codegen_kernels, 1) << c->explain(true);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kPatterns * 32));
  int bad = 0;
  for (std::int64_t h = 0; h < kPatterns; ++h) {
    const float want = sg::f16_to_f32(static_cast<std::uint16_t>(h));
    const float g = got[static_cast<std::size_t>(h * 32)];
    const bool same = std::isnan(want)
                          ? std::isnan(g)
                          : std::bit_cast<std::uint32_t>(g) == std::bit_cast<std::uint32_t>(want);
    if (!same && bad++ < 5)
      ADD_FAILURE() << "f16 0x" << std::hex << h << ": " << g << " vs " << want;
  }
}

// Random pointwise chains (seeded): generated code agrees with the kernels.
TEST_F(CodegenTest, random_pointwise_chains_agree_with_the_kernels) {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<int> program;
    for (int i = 0; i < 6; ++i) program.push_back(static_cast<int>(rng() % 9));
    const Fn fn = [program](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      namespace o = sg::ops;
      sg::Tensor x = std::get<sg::Tensor>(a[0]);
      const sg::Tensor& y = std::get<sg::Tensor>(a[1]);
      for (const int op : program) {
        switch (op) {
          case 0:
            x = o::add(x, y);
            break;
          case 1:
            x = o::mul(x, y);
            break;
          case 2:
            x = o::silu(x);
            break;
          case 3:
            x = o::tanh(x);
            break;
          case 4:
            x = o::sigmoid(x);
            break;
          case 5:
            x = o::sub(y, x);
            break;
          case 6:
            x = o::mul_scalar(x, 0.75);
            break;
          case 7:
            x = o::gelu(x);
            break;
          default:
            x = o::add_scalar(o::relu(x), -0.25);
            break;
        }
      }
      return {x};
    };
    const auto seed = static_cast<std::uint32_t>(100 + 2 * trial);
    (void)check(fn, {{rnd({5, 7}, seed), rnd({7}, seed + 1)}}, 1e-5F);
  }
}

// Loops with work enough for two grains split across the compute threads
// (Note [Parallel loops in generated code]): a pointwise chain over rows,
// norms and softmax by rows, a 256 KiB linear by blocks of output rows, and
// attention by kv heads. One compiled function serves 1, 2 and 3 threads:
// each agrees with the kernels, and is bitwise equal to the 1-thread result.
// Inputs alternate between calls, so a part that failed to run would leave
// the other call's values in the output and be caught.
TEST_F(CodegenTest, generated_loops_split_across_compute_threads) {
  const int saved_threads = sg::num_threads();
  const sg::Tensor norm = rnd({8192}, 30), w = rnd({256, 256}, 31, 0.1F);
  const Fn fn = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    namespace o = sg::ops;
    const auto& x = std::get<sg::Tensor>(a[0]);
    const sg::Tensor y = o::silu(o::add_scalar(o::mul(x, x), -0.5));
    return {o::softmax(o::rms_norm(y, norm, 1e-5)), o::linear(std::get<sg::Tensor>(a[1]), w),
            o::attention(std::get<sg::Tensor>(a[2]), std::get<sg::Tensor>(a[3]),
                         std::get<sg::Tensor>(a[4]), std::get<sg::SymInt>(a[5]), 0.125)};
  };
  auto inputs = [](std::uint32_t seed, std::int64_t len) {
    return Args{rnd({8, 8192}, seed),        rnd({1, 256}, seed + 1),     rnd({1, 8, 64}, seed + 2),
                rnd({512, 2, 64}, seed + 3), rnd({512, 2, 64}, seed + 4), sg::SymInt(len)};
  };
  const std::vector<Args> calls = {inputs(50, 300), inputs(60, 411)};
  auto compiled = sg::compile(fn, sg::get_backend(config()));
  std::vector<std::vector<std::vector<float>>> one_thread;  // [call][output]
  for (const int threads : {1, 2, 3}) {
    sg::set_num_threads(threads);
    for (std::size_t k = 0; k < calls.size(); ++k) {
      const std::vector<sg::Tensor> got = (*compiled)(calls[k]);
      const std::vector<sg::Tensor> want = fn(calls[k]);
      ASSERT_EQ(got.size(), 3U);
      std::vector<std::vector<float>> values;
      for (std::size_t o = 0; o < got.size(); ++o) {
        const std::vector<float> g = got[o].to_floats(), w2 = want[o].to_floats();
        ASSERT_EQ(g.size(), w2.size());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < g.size(); ++i) {
          if (!(std::fabs(g[i] - w2[i]) <= 1e-4F * (1.0F + std::fabs(w2[i]))) && bad++ < 3) {
            ADD_FAILURE() << threads << " threads, call " << k << ", output " << o << ", element "
                          << i << ": " << g[i] << " vs " << w2[i];
          }
        }
        if (threads > 1) {
          EXPECT_EQ(g, one_thread[k][o]) << threads << " threads, call " << k << ", output " << o;
        }
        values.push_back(g);
      }
      if (threads == 1) one_thread.push_back(std::move(values));
    }
  }
  sg::set_num_threads(saved_threads);
  EXPECT_EQ(compiled->counters().captured, 1);
  EXPECT_EQ(compiled->counters().codegen_kernels, 1) << compiled->explain(true);
  // Every one of those loops was emitted as a parallel loop.
  int parallel_loops = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    for (std::size_t at = 0; (at = text.find("sg_parallel_for(pool,", at)) != std::string::npos;
         ++at)
      ++parallel_loops;
  }
  EXPECT_EQ(parallel_loops, 5);
}

// Cold, then warm (a second compiled function in a process that already
// loaded the region counts as a hit; across processes: tests/cli/cli_test.sh).
TEST_F(CodegenTest, compile_cache_cold_warm_and_corrupt_entries) {
  const Fn fn = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::silu(sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), 3.0))};
  };
  const std::vector<Args> calls = {{rnd({2, 3}, 1)}};
  auto cold = check(fn, calls, 1e-6F);
  EXPECT_EQ(cold->counters().compile_cache_hits, 0);
  std::vector<fs::path> objects;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().extension() == ".so") objects.push_back(e.path());
  }
  ASSERT_EQ(objects.size(), 1U);
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
  auto warm = check(fn, calls, 1e-6F);
  EXPECT_EQ(warm->counters().compile_cache_hits, 1);

  // A corrupt entry needs a process that has not loaded it: tests/cli/cli_test.sh.
}

TEST_F(CodegenTest, no_compiler_warns_once_and_runs_the_kernels) {
  ASSERT_EQ(::setenv("SINKGRAPH_CXX", "/nonexistent/c++", 1), 0);
  std::vector<std::string> warnings;
  sg::set_log_handler([&](sg::LogLevel level, std::string_view m) {
    if (level == sg::LogLevel::warn) warnings.emplace_back(m);
  });
  const Fn fn = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::tanh(sg::ops::add_scalar(std::get<sg::Tensor>(a[0]), 1.0))};
  };
  auto c = check(fn, {{rnd({4}, 1)}, {rnd({4}, 2)}}, 0.0F);  // the kernels: bitwise equal
  sg::set_log_handler({});
  ::unsetenv("SINKGRAPH_CXX");
  EXPECT_EQ(c->counters().codegen_kernels, 0);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("'/nonexistent/c++' was not found"), std::string::npos) << warnings[0];
  EXPECT_NE(c->explain().find("runs on its kernels"), std::string::npos);
}

// A region that falls back runs its nodes' kernels, whose updatable scalars
// (positions) must still be patched per replay: a stale position here once
// repeated the first token forever.
TEST_F(CodegenTest, fallback_kernels_keep_their_updatable_positions) {
  ASSERT_EQ(::setenv("SINKGRAPH_CXX", "/nonexistent/c++", 1), 0);
  sg::set_log_handler([](sg::LogLevel, std::string_view) {});
  const sgtest::AttentionBlock block;
  const sg::Tensor k1 = rnd({16, 4, 8}, 10), v1 = rnd({16, 4, 8}, 11);
  const sg::Tensor k2 = rnd({16, 4, 8}, 10), v2 = rnd({16, 4, 8}, 11);
  std::vector<std::pair<Args, Args>> calls;
  for (int pos = 0; pos < 5; ++pos) {
    const sg::Tensor x = rnd({1, 32}, 40 + static_cast<std::uint32_t>(pos));
    calls.emplace_back(Args{x, sg::SymInt(pos), k1, v1}, Args{x, sg::SymInt(pos), k2, v2});
  }
  auto c = check(std::cref(block), calls, 0.0F);
  sg::set_log_handler({});
  ::unsetenv("SINKGRAPH_CXX");
  EXPECT_EQ(c->counters().codegen_kernels, 0);
  EXPECT_EQ(c->counters().captured, 1);
}

TEST_F(CodegenTest, codegen_false_keeps_every_kernel) {
  sg::CompilerConfig c = config();
  c.codegen = false;
  const Fn fn = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::exp(std::get<sg::Tensor>(a[0]))};
  };
  auto compiled = sg::compile(fn, sg::get_backend(c));
  (void)(*compiled)({rnd({4}, 1)})[0].to_floats();
  EXPECT_EQ(compiled->counters().codegen_kernels, 0);
  EXPECT_FALSE(fs::exists(dir_));
}

}  // namespace
