// The collective operators without MPI (Note [Collectives]): a test backend
// stands in for the process group, so these run in every preset, TSan
// included. tests/dist/ runs them over MPI with several processes.
#include "sinkgraph/collectives.h"

#include <atomic>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "helpers.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace {

namespace sg = sinkgraph;
using sgtest::error_of;

// A group of two processes whose other member always sends `peer_value`
// everywhere: all_reduce adds it, all_gather places it after our rows.
// Counts calls (kernels call it from stream workers).
class TwoRankBackend final : public sg::CollectiveBackend {
 public:
  static constexpr float kPeer = 0.5F;
  std::atomic<int> calls{0};

  std::string all_reduce_sum(std::int64_t group, const float* send, float* recv,
                             std::int64_t count) override {
    ++calls;
    if (group != 0) return "no group " + std::to_string(group);
    for (std::int64_t i = 0; i < count; ++i) recv[i] = send[i] + kPeer;
    return {};
  }
  std::string all_gather(std::int64_t group, const float* send, std::int64_t count, float* recv,
                         std::int64_t recv_count) override {
    ++calls;
    if (group != 0) return "no group " + std::to_string(group);
    if (recv_count != 2 * count) return "recv_count " + std::to_string(recv_count);
    std::memmove(recv, send, static_cast<std::size_t>(count) * sizeof(float));
    for (std::int64_t i = 0; i < count; ++i) recv[count + i] = kPeer;
    return {};
  }
};

// Installs a backend for one test, and removes it after.
class Collectives : public ::testing::Test {
 protected:
  void SetUp() override { sg::set_collective_backend(&backend_); }
  void TearDown() override {
    sg::current_stream().synchronize();
    sg::set_collective_backend(nullptr);
  }
  TwoRankBackend backend_;
};

std::vector<float> plus(std::vector<float> v, float d) {
  for (float& x : v) x += d;
  return v;
}

TEST(collectives_no_backend, is_a_clear_error_not_a_no_op) {
  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3}, {3});
  const std::string err = error_of([&] { (void)sg::ops::all_reduce(x, 0).to_floats(); });
  EXPECT_NE(err.find("all_reduce: no collective backend"), std::string::npos) << err;
  EXPECT_NE(err.find("dist::Communicator"), std::string::npos) << err;
  // The stream is usable afterwards.
  EXPECT_EQ(sg::ops::add(x, x).to_floats(), (std::vector<float>{2, 4, 6}));
}

TEST_F(Collectives, eager_results_and_errors) {
  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sg::ops::all_reduce(x, 0).to_floats(), plus(x.to_floats(), TwoRankBackend::kPeer));
  const sg::Tensor g = sg::ops::all_gather(x, 0, 2);
  EXPECT_EQ(g.shape(), (sg::Shape{4, 3}));
  EXPECT_EQ(g.to_floats(),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 0.5F, 0.5F, 0.5F, 0.5F, 0.5F, 0.5F}));
  // What the caller can get wrong, each named.
  EXPECT_NE(error_of([&] { (void)sg::ops::all_reduce(x, 7).to_floats(); }).find("no group 7"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)sg::ops::all_gather(x, 0, 3).to_floats(); }).find("recv_count"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)sg::ops::all_reduce(sg::ops::transpose(x, 0, 1), 0).to_floats();
            }).find("contiguous"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)sg::ops::all_reduce(sg::Tensor::from_ints({1}, {1}), 0);
            }).find("collectives take f32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)sg::ops::all_reduce(x, -1); }).find("negative"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)sg::ops::all_gather(x, 0, 0); }).find("group size"),
            std::string::npos);
}

// Two identical collectives stay two calls (no CSE), and a captured graph
// makes them on every replay, with each replay's input.
TEST_F(Collectives, captured_and_replayed_in_every_mode) {
  const auto body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const sg::Tensor x = std::get<sg::Tensor>(args[0]);
    const sg::Tensor h = sg::ops::mul_scalar(x, 2.0);
    const sg::Tensor a = sg::ops::all_reduce(h, 0);
    const sg::Tensor b = sg::ops::all_reduce(h, 0);
    return {sg::ops::add(a, sg::ops::all_gather(b, 0, 2))};
  };
  for (const char* mode : {"eager", "reduce-overhead", "max-autotune"}) {
    SCOPED_TRACE(mode);
    sg::CompilerConfig config;
    config.set("mode", mode);
    auto fn = sg::compile(body, sg::get_backend(config));
    constexpr int kCalls = 20;
    for (int call = 0; call < kCalls; ++call) {
      const std::vector<float> in{static_cast<float>(call), 1.0F, -2.0F};
      const int before = backend_.calls.load();
      const std::vector<float> out = (*fn)({sg::Tensor::from_floats(in, {1, 3})})[0].to_floats();
      EXPECT_EQ(backend_.calls.load() - before, 3) << "call " << call;
      // a = 2x + p (broadcast over the gathered rows); gathered = [2x + p; p].
      std::vector<float> want;
      want.reserve(2 * in.size());
      for (const float v : in) want.push_back((2 * v + 0.5F) + (2 * v + 0.5F));
      for (const float v : in) want.push_back((2 * v + 0.5F) + 0.5F);
      ASSERT_EQ(out, want) << "call " << call;
    }
    if (std::string(mode) != "eager") {
      EXPECT_EQ(fn->counters().captured, 1);
      EXPECT_GE(fn->counters().replayed, kCalls - 2);
    }
  }
}

}  // namespace
