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

// Note [Two vectors of eight in one register]: whichever loop this build
// compiles (two 8-float vectors, or one 16-float register on AVX-512), the
// sums are those of the documented order, emulated here one lane at a time:
// lane l of p sums elements 16c + l, lane l of q elements 16c + 8 + l, the
// leftover 8-chunk goes to p, then the lanes pairwise, then the tail in
// sequence. dot4_rows keeps one vector per pair (8-chunk c, lane l).
float lane_fma(float a, float b, float c) {
#if defined(__FMA__) || defined(__FP_FAST_FMAF)
  return std::fma(a, b, c);
#else
  return c + a * b;
#endif
}

float lanes_sum(const float (&v)[8]) {
  return (((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])));
}

float documented_dot(const float* a, const float* b, std::int64_t n) {
  float p[8] = {}, q[8] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 8; ++l) {
      p[l] = lane_fma(a[i + l], b[i + l], p[l]);
      q[l] = lane_fma(a[i + 8 + l], b[i + 8 + l], q[l]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) p[l] = lane_fma(a[i + l], b[i + l], p[l]);
  }
  float pq[8];
  for (int l = 0; l < 8; ++l) pq[l] = p[l] + q[l];
  float s = lanes_sum(pq);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

float documented_dot4(const float* w, const float* x, std::int64_t n) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] = lane_fma(w[i + l], x[i + l], acc[l]);
  }
  float s = lanes_sum(acc);
  for (; i < n; ++i) s = std::fma(w[i], x[i], s);
  return s;
}

TEST(ops_vec, dot_kernels_sum_in_the_documented_order_bitwise) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  for (const std::int64_t n : {1, 7, 8, 15, 16, 24, 40, 64, 288, 301}) {
    SCOPED_TRACE(n);
    std::vector<float> w(static_cast<std::size_t>(4 * n)), x(static_cast<std::size_t>(4 * n));
    for (auto& v : w) v = u(rng);
    for (auto& v : x) v = u(rng);
    const float* xs[4] = {x.data(), x.data() + n, x.data() + 2 * n, x.data() + 3 * n};
    EXPECT_EQ(vec::dot(w.data(), x.data(), n), documented_dot(w.data(), x.data(), n));
    float rows[4];
    float* outs[4] = {&rows[0], &rows[1], &rows[2], &rows[3]};
    vec::dot_rows<4>(w.data(), xs, n, outs);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(rows[j], documented_dot(w.data(), xs[j], n)) << j;
    // A streamed weight's path (Note [Prefetching a streamed weight]): the prefetch reads
    // ahead of the row and changes no sum.
    vec::dot_rows<1, true>(w.data(), xs, n, outs);
    EXPECT_EQ(rows[0], documented_dot(w.data(), xs[0], n)) << "prefetched";
    float block[4][4];
    float* bouts[4] = {block[0], block[1], block[2], block[3]};
    vec::dot_rows_block4<4>(w.data(), n, xs, n, bouts);
    for (int j = 0; j < 4; ++j) {
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(block[j][r], documented_dot(w.data() + r * n, xs[j], n)) << j << ", " << r;
      }
    }
    // With the next four rows prefetched (Note [Prefetching the next weight
    // rows]), past the end of w here: the same sums.
    vec::dot_rows_block4<4, true>(w.data(), n, xs, n, bouts);
    for (int j = 0; j < 4; ++j) {
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(block[j][r], documented_dot(w.data() + r * n, xs[j], n)) << j << ", " << r;
      }
    }
    float grid[3][4];
    float* gouts[3] = {grid[0], grid[1], grid[2]};
    vec::dot4_rows<3>(w.data(), n, xs, n, gouts);
    for (int j = 0; j < 3; ++j) {
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(grid[j][r], documented_dot4(w.data() + r * n, xs[j], n)) << j << ", " << r;
      }
    }
  }
}
