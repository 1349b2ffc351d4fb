// One setting controls intra-op threads for OpenBLAS and our kernels alike:
// our kernels' results do not depend on it. (OpenBLAS itself is left out:
// its own threads are invisible to the tsan preset, which keeps it at one.)
#include <random>

#include <gtest/gtest.h>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"

namespace {

namespace sg = sinkgraph;

sg::Tensor random(const sg::Shape& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(static_cast<std::size_t>(sg::numel(shape)));
  for (auto& x : v) x = dist(rng);
  return sg::Tensor::from_floats(v, shape);
}

struct Results {
  std::vector<float> add, silu, attention;
};

Results run_all() {
  const sg::Tensor a = random({300, 300}, 1), b = random({300, 300}, 2);
  const sg::Tensor q = random({4, 8, 16}, 3), k = random({32, 4, 16}, 4),
                   v = random({32, 4, 16}, 5);
  return {sg::ops::add(a, b).to_floats(), sg::ops::silu(a).to_floats(),
          sg::ops::attention(q, k, v, 20).to_floats()};
}

TEST(ops_threads, results_do_not_depend_on_the_intra_op_thread_count) {
  ASSERT_EQ(sg::num_threads(), 1) << "the default is one compute thread per stream worker";
  const Results one = run_all();
  sg::set_num_threads(2);
  const Results two = run_all();
  sg::set_num_threads(1);
  EXPECT_EQ(one.add, two.add);
  EXPECT_EQ(one.silu, two.silu);
  EXPECT_EQ(one.attention, two.attention);
  EXPECT_THROW(sg::set_num_threads(0), sg::Error);
}

}  // namespace
