// The collective operators over MPI, run by ctest as `mpirun -np N` (every
// rank runs every test; a failure on any rank fails the job). Each result is
// checked against a naive reduction each rank computes on its own from the
// inputs it knows every rank sent.
#include <cmath>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/compiler.h"
#include "sinkgraph/device.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace {

namespace sg = sinkgraph;
namespace dist = sinkgraph::dist;

// What rank r sends at element i of call `call`: distinct per rank, element
// and call, exactly representable so sums in any order agree bitwise.
float sent(int rank, std::int64_t i, int call) {
  return static_cast<float>(std::int64_t{rank + 1} * 1000 + i * 3 + call) * 0.25F;
}

std::vector<float> inputs(int rank, std::int64_t n, int call) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = sent(rank, i, call);
  return v;
}

std::vector<float> naive_sum(int size, std::int64_t n, int call) {
  std::vector<float> v(static_cast<std::size_t>(n), 0.0F);
  for (int r = 0; r < size; ++r) {
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] += sent(r, i, call);
  }
  return v;
}

std::vector<float> naive_gather(int size, std::int64_t n, int call) {
  std::vector<float> v;
  for (int r = 0; r < size; ++r) {
    const std::vector<float> part = inputs(r, n, call);
    v.insert(v.end(), part.begin(), part.end());
  }
  return v;
}

const dist::Communicator& world() {
  static const dist::Communicator c = dist::Communicator::world();
  return c;
}

TEST(dist, world_matches_the_launcher) {
  EXPECT_TRUE(dist::launched_by_mpi());
  EXPECT_EQ(world().size(), dist::world_size());
  EXPECT_EQ(world().rank(), dist::world_rank());
  EXPECT_GE(world().size(), 2) << "run under mpirun -np 2 or more";
}

TEST(dist, eager_collectives_match_a_naive_reduction) {
  const int rank = world().rank(), size = world().size();
  for (const std::int64_t n : {1, 7, 4096}) {
    const sg::Tensor x = sg::Tensor::from_floats(inputs(rank, n, 0), {n});
    EXPECT_EQ(dist::all_reduce(world(), x).to_floats(), naive_sum(size, n, 0)) << n;
    const sg::Tensor g = dist::all_gather(world(), sg::ops::reshape(x, {1, n}));
    EXPECT_EQ(g.shape(), (sg::Shape{size, n}));
    EXPECT_EQ(g.to_floats(), naive_gather(size, n, 0)) << n;
  }
}

// A tensor-parallel step in miniature: each rank's partial product, summed
// and gathered inside one captured graph, replayed many times with new
// inputs each call.
TEST(dist, captured_collectives_replayed_many_times) {
  const int rank = world().rank(), size = world().size();
  const std::int64_t group = world().group();
  const auto body = [group, size](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const sg::Tensor x = std::get<sg::Tensor>(args[0]);
    const sg::Tensor s = sg::ops::all_reduce(sg::ops::add_scalar(x, 0.0), group);
    return {sg::ops::mul_scalar(s, 2.0), sg::ops::all_gather(x, group, size)};
  };
  constexpr std::int64_t kN = 64;
  constexpr int kCalls = 100;
  for (const char* mode : {"reduce-overhead", "max-autotune"}) {
    SCOPED_TRACE(mode);
    sg::CompilerConfig config;
    config.set("mode", mode);
    auto fn = sg::compile(body, sg::get_backend(config));
    for (int call = 0; call < kCalls; ++call) {
      const auto out = (*fn)({sg::Tensor::from_floats(inputs(rank, kN, call), {1, kN})});
      std::vector<float> want = naive_sum(size, kN, call);
      for (float& v : want) v *= 2;
      EXPECT_EQ(out[0].to_floats(), want) << "call " << call;
      EXPECT_EQ(out[1].to_floats(), naive_gather(size, kN, call)) << "call " << call;
    }
    EXPECT_EQ(fn->counters().captured, 1);
    EXPECT_GE(fn->counters().replayed, kCalls - 2);
  }
}

// Two groups, each on its own stream driven by its own host thread, at once
// (Note [MPI threading]: the reason for MPI_THREAD_MULTIPLE).
TEST(dist, two_groups_on_two_streams_at_once) {
  const dist::Communicator a = dist::Communicator::world();
  const dist::Communicator b = dist::Communicator::world();
  const int rank = a.rank(), size = a.size();
  const auto drive = [&](const dist::Communicator& comm, int offset, bool* ok) {
    auto stream = sg::cpu().create_stream();
    const sg::StreamGuard guard(*stream);
    *ok = true;
    for (int call = 0; call < 50; ++call) {
      const sg::Tensor x = sg::Tensor::from_floats(inputs(rank, 256, call + offset), {256});
      if (dist::all_reduce(comm, x).to_floats() != naive_sum(size, 256, call + offset)) *ok = false;
    }
  };
  bool ok_a = false, ok_b = false;
  std::thread ta(drive, std::cref(a), 0, &ok_a);
  std::thread tb(drive, std::cref(b), 1000, &ok_b);
  ta.join();
  tb.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

// Errors every rank makes alike are raised on every rank, and the group
// still works after.
TEST(dist, errors_are_raised_and_the_group_still_works) {
  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3}, {3});
  try {
    (void)sg::ops::all_gather(x, world().group(), world().size() + 1).to_floats();
    ADD_FAILURE() << "a wrong group size must be an error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("group size"), std::string::npos) << e.what();
  }
  try {
    (void)sg::ops::all_reduce(x, 63).to_floats();
    ADD_FAILURE() << "an unknown group must be an error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a communicator"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dist::all_reduce(world(), x).to_floats(),
            (std::vector<float>{1.0F * static_cast<float>(world().size()),
                                2.0F * static_cast<float>(world().size()),
                                3.0F * static_cast<float>(world().size())}));
}

}  // namespace
