// The batched-decoding operators (one row per sequence, each at its own
// position, positions as an i64 tensor): rope_rows, index_copy_rows_ and
// attention_rows, against the naive references row by row, and bitwise
// against the one-sequence operators on that row alone (batch invariance:
// a sequence's result must not depend on what it is batched with), at 1, 2
// and 3 compute threads. Then their errors: bad positions found by the
// kernel, bad shapes and dtypes found before launch.
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "thread_count.h"

namespace {

namespace sg = sinkgraph;
namespace ref = sgtest::ref;
using sgtest::make;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> rows_of(const std::vector<float>& x, std::int64_t row_size, std::int64_t b) {
  return {x.begin() + b * row_size, x.begin() + (b + 1) * row_size};
}

using sgtest::ThreadCount;

TEST(ops_batched, rope_rows_rotates_each_row_at_its_position) {
  std::mt19937 rng(1);
  const std::int64_t rows = 5, heads = 3, d = 8;
  const auto x = sgtest::random_floats(rng, rows * heads * d);
  const std::vector<std::int64_t> pos = {0, 7, 3, 250, 7};
  for (const auto style : {sg::ops::RopeStyle::interleaved, sg::ops::RopeStyle::half}) {
    const auto got = sg::ops::rope_rows(make(x, {rows, heads, d}),
                                        sg::Tensor::from_ints(pos, {rows}), 10000.0, style)
                         .to_floats();
    for (std::int64_t b = 0; b < rows; ++b) {
      const auto xb = rows_of(x, heads * d, b);
      const auto want = ref::rope(xb, 1, heads, d, pos[static_cast<std::size_t>(b)], 10000.0,
                                  style == sg::ops::RopeStyle::half);
      const auto row = rows_of(got, heads * d, b);
      EXPECT_TRUE(sgtest::all_close(row, want, 1e-5, 1e-6)) << "row " << b;
      const auto alone =
          sg::ops::rope(make(xb, {1, heads, d}), pos[static_cast<std::size_t>(b)], 10000.0, style)
              .to_floats();
      EXPECT_TRUE(bitwise_equal(row, alone)) << "row " << b;
    }
  }
}

TEST(ops_batched, index_copy_rows_writes_each_row_at_its_position) {
  const std::int64_t rows = 3, cap = 4, heads = 2, d = 3;
  const sg::Tensor dst = sg::ops::zeros({rows, cap, heads, d});
  std::vector<float> src(static_cast<std::size_t>(rows * heads * d));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i + 1);
  // src as a transposed view: a strided source must land the same.
  const sg::Tensor src_t = sg::ops::transpose(
      sg::ops::contiguous(sg::ops::transpose(make(src, {rows, heads, d}), 1, 2)), 1, 2);
  const std::vector<std::int64_t> pos = {2, 0, 3};
  sg::ops::index_copy_rows_(dst, sg::Tensor::from_ints(pos, {rows}), src_t);
  const auto got = dst.to_floats();
  for (std::int64_t b = 0; b < rows; ++b) {
    for (std::int64_t p = 0; p < cap; ++p) {
      for (std::int64_t e = 0; e < heads * d; ++e) {
        const float want = p == pos[static_cast<std::size_t>(b)]
                               ? src[static_cast<std::size_t>(b * heads * d + e)]
                               : 0.0F;
        EXPECT_EQ(got[static_cast<std::size_t>(((b * cap) + p) * heads * d + e)], want)
            << "row " << b << ", position " << p << ", element " << e;
      }
    }
  }
}

// Each row against its own cache and length: the naive reference, and the
// one-sequence attention() on that row alone, bitwise, at every thread count.
TEST(ops_batched, attention_rows_is_each_row_alone_at_1_2_and_3_threads) {
  const ThreadCount restore;
  std::mt19937 rng(2);
  for (const std::int64_t d : {64, 12}) {  // vectorized head size, and a scalar tail
    const std::int64_t rows = 6, hq = 8, hkv = 2, cache = 300;
    const auto q = sgtest::random_floats(rng, rows * hq * d);
    const auto k = sgtest::random_floats(rng, rows * cache * hkv * d);
    const auto v = sgtest::random_floats(rng, rows * cache * hkv * d);
    const std::vector<std::int64_t> pos = {0, 299, 17, 150, 8, 9};
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const sg::Tensor tq = make(q, {rows, hq, d}), tk = make(k, {rows, cache, hkv, d}),
                     tv = make(v, {rows, cache, hkv, d});
    for (const int threads : {1, 2, 3}) {
      sg::set_num_threads(threads);
      const auto got =
          sg::ops::attention_rows(tq, tk, tv, sg::Tensor::from_ints(pos, {rows}), scale)
              .to_floats();
      for (std::int64_t b = 0; b < rows; ++b) {
        const std::int64_t seq = pos[static_cast<std::size_t>(b)] + 1;
        const auto qb = rows_of(q, hq * d, b), kb = rows_of(k, cache * hkv * d, b),
                   vb = rows_of(v, cache * hkv * d, b);
        const auto row = rows_of(got, hq * d, b);
        EXPECT_TRUE(sgtest::all_close(row, ref::attention(qb, kb, vb, 1, hq, hkv, d, seq, scale),
                                      1e-4, 1e-5))
            << "d " << d << ", row " << b << ", " << threads << " threads";
        const auto alone = sg::ops::attention(make(qb, {1, hq, d}), make(kb, {cache, hkv, d}),
                                              make(vb, {cache, hkv, d}), seq, scale)
                               .to_floats();
        EXPECT_TRUE(bitwise_equal(row, alone))
            << "d " << d << ", row " << b << ", " << threads << " threads";
      }
    }
  }
}

TEST(ops_batched, positions_out_of_range_are_kernel_errors_and_shapes_are_checked) {
  const sg::Tensor q = sg::ops::zeros({2, 4, 8}), k = sg::ops::zeros({2, 5, 2, 8});
  const auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const sg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] {
        (void)sg::ops::attention_rows(q, k, k, sg::Tensor::from_ints({1, 5}, {2})).to_floats();
      },
      "position 5 of row 1 is out of range for a cache of 5 positions");
  expect_error(
      [&] {
        sg::ops::index_copy_rows_(k, sg::Tensor::from_ints({-1, 0}, {2}),
                                  sg::ops::zeros({2, 2, 8}));
        (void)k.to_floats();
      },
      "index -1 of row 0 is out of range");
  // Before launch: one position per row, i64; f32 only; matching rows.
  expect_error([&] { (void)sg::ops::attention_rows(q, k, k, sg::Tensor::from_ints({1}, {1})); },
               "one position per row");
  expect_error(
      [&] {
        (void)sg::ops::rope_rows(q, sg::Tensor::from_floats({1.0F, 2.0F}, {2}));
      },
      "expected i64 [B]");
  expect_error(
      [&] {
        (void)sg::ops::attention_rows(q, sg::ops::zeros({3, 5, 2, 8}), sg::ops::zeros({3, 5, 2, 8}),
                                      sg::Tensor::from_ints({0, 0}, {2}));
      },
      "must agree on the rows");
  // The stream is usable after a kernel error.
  EXPECT_EQ(sg::ops::attention_rows(q, k, k, sg::Tensor::from_ints({0, 4}, {2})).to_floats().size(),
            64U);
}

}  // namespace
