// The vectorized helpers behind the decode kernels (Note [Vectorized inner
// loops]) against the C library and plain loops.
#include "kernels/cpu/vec.h"  // internal: the tests build with src/ on the include path

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace vec = sinkgraph::kernels::cpu::vec;

TEST(ops_vec, exp_matches_std_exp_to_two_parts_in_ten_million) {
  // Steps of 1e-3 over the range where exp is a normal float.
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.0F; x < 88.5F; x = std::nextafter(x + 1e-3F, 100.0F)) {
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(static_cast<double>(vec::exp(x)) - want) / want;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << worst_x;
  EXPECT_EQ(vec::exp(0.0F), 1.0F);
  EXPECT_EQ(vec::exp(-100.0F), 0.0F);
  EXPECT_EQ(vec::exp(-std::numeric_limits<float>::infinity()), 0.0F);
  EXPECT_EQ(vec::exp(100.0F), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(vec::exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(ops_vec, erf_matches_std_erf_to_five_parts_in_ten_million) {
  // Steps of 1e-4 over [-6, 6] (erf is ±1 in f32 past about ±3.9).
  double worst = 0;
  for (int i = -60000; i <= 60000; ++i) {
    const float x = static_cast<float>(i) * 1e-4F;
    worst = std::max(worst, std::abs(static_cast<double>(vec::erf(x)) - std::erf(double{x})));
  }
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(vec::erf(0.0F), 0.0F);
  EXPECT_EQ(vec::erf(std::numeric_limits<float>::infinity()), 1.0F);
  EXPECT_EQ(vec::erf(-std::numeric_limits<float>::infinity()), -1.0F);
  EXPECT_EQ(vec::erf(-2.0F), -vec::erf(2.0F));  // odd
  EXPECT_TRUE(std::isnan(vec::erf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(ops_vec, dot_matches_a_double_loop) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const std::int64_t n : {0, 1, 7, 8, 9, 64, 513}) {
    std::vector<float> a(static_cast<std::size_t>(n)), b(a.size());
    for (auto& x : a) x = u(rng);
    for (auto& x : b) x = u(rng);
    double want = 0;
    for (std::size_t i = 0; i < a.size(); ++i) want += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(vec::dot(a.data(), b.data(), n), want, 1e-5 * (1 + static_cast<double>(n)))
        << "n = " << n;
  }
}

TEST(ops_vec, max_matches_a_sequential_std_max) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-50, 50);
  for (const std::int64_t n : {0, 1, 7, 8, 9, 64, 513}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x) v = u(rng);
    float want = -std::numeric_limits<float>::infinity();
    for (const float v : x) want = std::max(want, v);
    EXPECT_EQ(vec::max(x.data(), n), want) << "n = " << n;
    if (n > 3) {  // a NaN is skipped, in a lane block and in the tail alike
      x[2] = std::numeric_limits<float>::quiet_NaN();
      x[static_cast<std::size_t>(n) - 1] = std::numeric_limits<float>::quiet_NaN();
      float skip = -std::numeric_limits<float>::infinity();
      for (const float v : x) skip = std::max(skip, v);
      EXPECT_EQ(vec::max(x.data(), n), skip) << "n = " << n;
    }
  }
}

}  // namespace
