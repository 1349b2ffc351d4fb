// Views (slice, narrow, view, transpose, permute, reshape, contiguous), cat,
// the in-place writes (copy_, index_copy_, fill_) and the factories.
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"

namespace {

using sinkgraph::DType;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::Dims;
using sgtest::make;

// Views, copies, cat, fills and factories move values without arithmetic:
// every comparison in this file is exact.

std::vector<float> iota(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(ops_views, slice_random) {
  std::mt19937 rng(91);
  const Dims shapes[] = {{7}, {4, 6}, {3, 5, 4}, {2, 3, 4, 5}, {1, 9}};
  for (const auto& s : shapes) {
    const auto base = sgtest::random_floats(rng, ref::numel(s));
    const Tensor x = make(base, s);
    for (int trial = 0; trial < 6; ++trial) {
      const int dim = std::uniform_int_distribution<int>(0, static_cast<int>(s.size()) - 1)(rng);
      const std::int64_t n = s[static_cast<std::size_t>(dim)];
      std::int64_t start = std::uniform_int_distribution<std::int64_t>(0, n)(rng);
      std::int64_t end = std::uniform_int_distribution<std::int64_t>(start, n)(rng);
      const std::int64_t step = std::uniform_int_distribution<std::int64_t>(1, 3)(rng);
      SCOPED_TRACE(sgtest::str(s) + " dim " + std::to_string(dim) + " [" + std::to_string(start) +
                   ":" + std::to_string(end) + ":" + std::to_string(step) + "]");
      const Tensor v = ops::slice(x, dim, start, end, step);
      EXPECT_TRUE(v.shares_storage(x));
      Dims want_shape = s;
      want_shape[static_cast<std::size_t>(dim)] = (end - start + step - 1) / step;
      EXPECT_EQ(sgtest::dims_of(v), want_shape);
      EXPECT_EQ(v.to_floats(), ref::slice(base, s, dim, start, end, step));
    }
  }
}

TEST(ops_views, slice_negative_bounds_and_narrow) {
  const auto base = iota(4 * 6);
  const Tensor x = make(base, {4, 6});
  // [-4, -1) on dim 1 is [2, 5); dim -2 is dim 0.
  EXPECT_EQ(ops::slice(x, 1, -4, -1).to_floats(), ref::slice(base, {4, 6}, 1, 2, 5, 1));
  EXPECT_EQ(ops::slice(x, -2, 1, 3).to_floats(), ref::slice(base, {4, 6}, 0, 1, 3, 1));
  const Tensor n = ops::narrow(x, 1, 3, 2);
  EXPECT_TRUE(n.shares_storage(x));
  EXPECT_EQ(sgtest::dims_of(n), (Dims{4, 2}));
  EXPECT_EQ(n.to_floats(), ref::slice(base, {4, 6}, 1, 3, 5, 1));
  const Tensor empty = ops::narrow(x, 0, 4, 0);
  EXPECT_EQ(sgtest::dims_of(empty), (Dims{0, 6}));
  EXPECT_TRUE(empty.to_floats().empty());
  // Slicing a slice composes offsets and strides.
  const Tensor ss = ops::slice(ops::slice(x, 1, 1, 6, 2), 0, 1, 4, 2);
  EXPECT_EQ(ss.to_floats(), ref::slice(ref::slice(base, {4, 6}, 1, 1, 6, 2), {4, 3}, 0, 1, 4, 2));
}

TEST(ops_views, transpose_and_permute) {
  std::mt19937 rng(92);
  const auto base = sgtest::random_floats(rng, 2 * 3 * 4 * 5);
  const Dims s = {2, 3, 4, 5};
  const Tensor x = make(base, s);
  const Tensor t = ops::transpose(x, 1, -1);
  EXPECT_TRUE(t.shares_storage(x));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(sgtest::dims_of(t), (Dims{2, 5, 4, 3}));
  EXPECT_EQ(t.to_floats(), ref::permute(base, s, {0, 3, 2, 1}));
  EXPECT_EQ(ops::transpose(x, 2, 2).to_floats(), base);
  const Dims perms[] = {{3, 1, 0, 2}, {0, 1, 2, 3}, {1, 0, 3, 2}, {2, 3, 1, 0}};
  for (const auto& p : perms) {
    SCOPED_TRACE(sgtest::str(p));
    const Tensor v = ops::permute(x, std::vector<std::int64_t>(p.begin(), p.end()));
    EXPECT_TRUE(v.shares_storage(x));
    EXPECT_EQ(sgtest::dims_of(v), ref::permuted(s, p));
    EXPECT_EQ(v.to_floats(), ref::permute(base, s, p));
  }
  // Negative dims in permute; a permute of a permute.
  const Tensor pp = ops::permute(ops::permute(x, {-1, 0, 2, 1}), {1, 3, 2, 0});
  EXPECT_EQ(pp.to_floats(),
            ref::permute(ref::permute(base, s, {3, 0, 2, 1}), {5, 2, 4, 3}, {1, 3, 2, 0}));
}

TEST(ops_views, view_and_reshape) {
  const auto base = iota(24);
  const Tensor x = make(base, {2, 3, 4});
  const Tensor v = ops::view(x, {6, 4});
  EXPECT_TRUE(v.shares_storage(x));
  EXPECT_EQ(sgtest::dims_of(v), (Dims{6, 4}));
  EXPECT_EQ(v.to_floats(), base);
  EXPECT_EQ(sgtest::dims_of(ops::view(x, {-1})), (Dims{24}));
  EXPECT_EQ(sgtest::dims_of(ops::view(x, {4, -1, 3})), (Dims{4, 2, 3}));
  EXPECT_EQ(sgtest::dims_of(ops::view(x, {1, 24, 1})), (Dims{1, 24, 1}));
  // A view of a contiguous slice (offset != 0) keeps the offset.
  const Tensor row = ops::slice(x, 0, 1, 2);
  EXPECT_EQ(ops::view(row, {12}).to_floats(), ref::slice(base, {2, 3, 4}, 0, 1, 2, 1));
  // Empty tensors view freely.
  const Tensor e = Tensor::empty({0, 4}, DType::f32);
  EXPECT_EQ(sgtest::dims_of(ops::view(e, {2, 0, 2})), (Dims{2, 0, 2}));

  // reshape of contiguous data is a view...
  const Tensor r = ops::reshape(x, {3, 8});
  EXPECT_TRUE(r.shares_storage(x));
  EXPECT_EQ(r.to_floats(), base);
  // ...and of non-contiguous data a copy with the logical order.
  const Tensor t = ops::transpose(x, 0, 2);  // [4, 3, 2]
  const Tensor rc = ops::reshape(t, {12, 2});
  EXPECT_FALSE(rc.shares_storage(x));
  EXPECT_TRUE(rc.is_contiguous());
  EXPECT_EQ(sgtest::dims_of(rc), (Dims{12, 2}));
  EXPECT_EQ(rc.to_floats(), ref::permute(base, {2, 3, 4}, {2, 1, 0}));
}

TEST(ops_views, contiguous) {
  const auto base = iota(12);
  const Tensor x = make(base, {3, 4});
  const Tensor same = ops::contiguous(x);
  EXPECT_TRUE(same.shares_storage(x));
  EXPECT_EQ(same.data_ptr(), x.data_ptr());
  EXPECT_TRUE(x.contiguous().shares_storage(x));
  // A contiguous slice (rows) is returned as is, too.
  const Tensor rows = ops::slice(x, 0, 1, 3);
  EXPECT_EQ(ops::contiguous(rows).data_ptr(), rows.data_ptr());
  // A non-contiguous view is copied.
  const Tensor t = ops::transpose(x, 0, 1);
  const Tensor c = ops::contiguous(t);
  EXPECT_FALSE(c.shares_storage(x));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(sgtest::dims_of(c), (Dims{4, 3}));
  EXPECT_EQ(c.to_floats(), ref::permute(base, {3, 4}, {1, 0}));
  const Tensor stepped = ops::slice(x, 1, 0, 4, 3);
  EXPECT_EQ(ops::contiguous(stepped).to_floats(), ref::slice(base, {3, 4}, 1, 0, 4, 3));
  // f16 and i64 copies keep the bits.
  const Tensor h = make({1.5F, -2.0F, 65504.0F, 0.099975586F}, {2, 2}, DType::f16);
  EXPECT_EQ(ops::contiguous(ops::transpose(h, 0, 1)).to_floats(),
            (std::vector<float>{1.5F, 65504.0F, -2.0F, 0.099975586F}));
  const Tensor i = Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::contiguous(ops::transpose(i, 0, 1)).to_ints(),
            (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}));
}

TEST(ops_views, writes_through_a_view_are_visible_in_the_base) {
  const Tensor base = ops::zeros({3, 4});
  // copy_ into a column (strided view), fill_ a row, index_copy_ into a slice.
  ops::copy_(ops::slice(base, 1, 2, 3), make({1, 2, 3}, {3, 1}));
  ops::fill_(ops::slice(base, 0, 0, 1), 7.0);
  ops::copy_(ops::transpose(ops::slice(base, 0, 2, 3), 0, 1), make({9, 8, 7, 6}, {4, 1}));
  EXPECT_EQ(base.to_floats(), (std::vector<float>{7, 7, 7, 7, 0, 0, 2, 0, 9, 8, 7, 6}));
  // The returned tensor of an in-place op is its dst.
  const Tensor col = ops::slice(base, 1, 0, 1);
  const Tensor back = ops::fill_(col, -1.0);
  EXPECT_TRUE(back.shares_storage(base));
  EXPECT_EQ(back.data_ptr(), col.data_ptr());
  EXPECT_EQ(base.to_floats(), (std::vector<float>{-1, 7, 7, 7, -1, 0, 2, 0, -1, 8, 7, 6}));
}

// ---- cat ----------------------------------------------------------------

TEST(ops_cat, along_each_dim) {
  std::mt19937 rng(93);
  for (int dim = -3; dim < 3; ++dim) {
    const int d = dim < 0 ? dim + 3 : dim;
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<Dims> shapes;
    std::vector<std::vector<float>> values;
    std::vector<Tensor> tensors;
    for (const std::int64_t len : {2, 0, 3, 1}) {
      Dims s = {2, 3, 4};
      s[static_cast<std::size_t>(d)] = len;
      shapes.push_back(s);
      values.push_back(sgtest::random_floats(rng, ref::numel(s)));
      tensors.push_back(make(values.back(), s));
    }
    const Tensor out = ops::cat(tensors, dim);
    Dims want_shape = {2, 3, 4};
    want_shape[static_cast<std::size_t>(d)] = 6;
    EXPECT_EQ(sgtest::dims_of(out), want_shape);
    EXPECT_EQ(out.to_floats(), ref::cat(values, shapes, d));
  }
}

TEST(ops_cat, non_contiguous_inputs_and_dtypes) {
  std::mt19937 rng(94);
  const auto a = sgtest::random_floats(rng, 12);
  const auto b = sgtest::random_floats(rng, 8);
  const Tensor ta = ops::transpose(make(a, {4, 3}), 0, 1);  // [3, 4]
  const Tensor tb = ops::slice(make(b, {2, 4}), 0, 1, 2);   // [1, 4], offset 4
  const auto va = ref::permute(a, {4, 3}, {1, 0});
  const auto vb = ref::slice(b, {2, 4}, 0, 1, 2, 1);
  EXPECT_EQ(ops::cat({ta, tb}, 0).to_floats(), ref::cat<float>({va, vb}, {{3, 4}, {1, 4}}, 0));
  EXPECT_EQ(ops::cat({ta}, 1).to_floats(), va);
  std::vector<float> sa, sb;
  const Tensor ha = make(a, {4, 3}, DType::bf16, &sa);
  const Tensor hb = make(b, {4, 2}, DType::bf16, &sb);
  const Tensor hc = ops::cat({ha, hb}, 1);
  EXPECT_EQ(hc.dtype(), DType::bf16);
  EXPECT_EQ(hc.to_floats(), ref::cat<float>({sa, sb}, {{4, 3}, {4, 2}}, 1));
  const std::vector<std::int64_t> ia = {1, 2, 3}, ib = {4, 5};
  EXPECT_EQ(
      ops::cat({Tensor::from_ints(ia, {3}, DType::i32), Tensor::from_ints(ib, {2}, DType::i32)}, 0)
          .to_ints(),
      (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
}

// ---- copy_ ----------------------------------------------------------------

TEST(ops_copy, broadcast_and_strided) {
  std::mt19937 rng(95);
  const auto row = sgtest::random_floats(rng, 4);
  const Tensor dst = ops::zeros({3, 4});
  ops::copy_(dst, make(row, {4}));
  EXPECT_EQ(dst.to_floats(), ref::binary(std::vector<float>(12, 0.0F), {3, 4}, row, {4},
                                         [](float, float y) { return y; }));
  const auto col = sgtest::random_floats(rng, 3);
  ops::copy_(dst, make(col, {3, 1}));
  EXPECT_EQ(dst.to_floats(), ref::binary(std::vector<float>(12, 0.0F), {3, 4}, col, {3, 1},
                                         [](float, float y) { return y; }));
  // A 0-d source fills; a transposed source is copied in logical order.
  ops::copy_(dst, make({2.5F}, {}));
  EXPECT_EQ(dst.to_floats(), std::vector<float>(12, 2.5F));
  const auto src = sgtest::random_floats(rng, 12);
  ops::copy_(dst, ops::transpose(make(src, {4, 3}), 0, 1));
  EXPECT_EQ(dst.to_floats(), ref::permute(src, {4, 3}, {1, 0}));
}

// Note [Coalesced rows] in a copy: attention's head transpose made
// contiguous ([B, S, H, D] -> [B, H, S, D], rows of D), a slice of a cache
// written into (dst strided, rows merged across the kept dims), a size-1 dim
// between merged ones, and the same with a dtype conversion (element by
// element); each in logical order against the reference.
TEST(ops_copy, permuted_and_sliced_rows) {
  std::mt19937 rng(96);
  const auto src = sgtest::random_floats(rng, 2 * 5 * 3 * 8);
  const Tensor heads = ops::permute(make(src, {2, 5, 3, 8}), {0, 2, 1, 3});
  const auto want = ref::permute(src, {2, 5, 3, 8}, {0, 2, 1, 3});
  EXPECT_EQ(ops::contiguous(heads).to_floats(), want);
  const Tensor h16 = Tensor::empty({2, 3, 5, 8}, DType::bf16);
  ops::copy_(h16, heads);
  EXPECT_EQ(h16.to_floats(), make(want, {2, 3, 5, 8}, DType::bf16).to_floats());

  // cache[:, :, 2:7, :] = new, with a size-1 batch dim in front.
  const Tensor cache = ops::zeros({1, 3, 10, 8});
  const auto fresh = sgtest::random_floats(rng, 3 * 5 * 8);
  ops::copy_(ops::slice(cache, 2, 2, 7), make(fresh, {1, 3, 5, 8}));
  const auto got = cache.to_floats();
  for (std::int64_t h = 0; h < 3; ++h) {
    for (std::int64_t t = 0; t < 10; ++t) {
      for (std::int64_t d = 0; d < 8; ++d) {
        const float want_v = t >= 2 && t < 7 ? fresh[(h * 5 + (t - 2)) * 8 + d] : 0.0F;
        ASSERT_EQ(got[(h * 10 + t) * 8 + d], want_v) << h << "," << t << "," << d;
      }
    }
  }
}

TEST(ops_copy, converts_dtypes) {
  // f32 -> f16 rounds to nearest even; chosen bit patterns:
  const float tie_down = 1.0F + std::ldexp(1.0F, -11);       // halfway 1 and 1+2^-10: to 1
  const float tie_up = 1.0F + 3.0F * std::ldexp(1.0F, -11);  // halfway, odd below: up to 1+2^-9
  const float sub = std::ldexp(1.0F, -24);                   // the smallest f16 subnormal
  const float sub_half = std::ldexp(1.0F, -25);              // halfway to 0: even -> 0
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> src = {tie_down, tie_up, sub,   sub_half, 65504.0F,
                                  65520.0F, 1e6F,   -1e6F, nan,      -0.0F};
  const Tensor h = Tensor::empty({10}, DType::f16);
  ops::copy_(h, make(src, {10}));
  const std::vector<float> want_h = {
      1.0F, 1.0F + std::ldexp(1.0F, -9), sub, 0.0F, 65504.0F, inf, inf, -inf, nan, -0.0F};
  const auto got_h = h.to_floats();
  EXPECT_TRUE(sgtest::all_close(got_h, want_h, 0.0, 0.0));
  EXPECT_TRUE(std::signbit(got_h[9]));
  // f32 -> bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even -> 1;
  // 1 + 3*2^-8 rounds up to 1 + 2^-6; the largest finite f32 overflows to inf.
  const Tensor b = Tensor::empty({4}, DType::bf16);
  ops::copy_(b, make({1.0F + std::ldexp(1.0F, -8), 1.0F + 3.0F * std::ldexp(1.0F, -8),
                      std::numeric_limits<float>::max(), nan},
                     {4}));
  EXPECT_TRUE(
      sgtest::all_close(b.to_floats(), {1.0F, 1.0F + std::ldexp(1.0F, -6), inf, nan}, 0.0, 0.0));
  // i64 -> f32 (2^24 + 1 is not representable: rounds to even), f16 -> f32 exact.
  const Tensor f = Tensor::empty({3}, DType::f32);
  ops::copy_(f, Tensor::from_ints({-7, 16777217, 3}, {3}));
  EXPECT_EQ(f.to_floats(), (std::vector<float>{-7.0F, 16777216.0F, 3.0F}));
  ops::copy_(f, make({0.1F, 2.0F, -3.5F}, {3}, DType::f16));
  EXPECT_EQ(f.to_floats(), (std::vector<float>{0.0999755859375F, 2.0F, -3.5F}));
  // f16 -> f32 is exact, subnormals, infinities and NaN included.
  const Tensor f4 = Tensor::empty({4}, DType::f32);
  ops::copy_(f4, h.slice(0, 2, 10, 2));  // sub, 65504, 1e6 -> inf, nan as stored
  EXPECT_TRUE(sgtest::all_close(f4.to_floats(), {sub, 65504.0F, inf, nan}, 0, 0));
  ops::copy_(f4, h.slice(0, 1, 9, 2));  // tie_up, sub_half -> 0, 65520 -> inf, -inf
  EXPECT_TRUE(
      sgtest::all_close(f4.to_floats(), {1.0F + std::ldexp(1.0F, -9), 0.0F, inf, -inf}, 0, 0));
  // More f16 rounding: just below the overflow threshold, and a subnormal tie
  // (3 * 2^-25 lies halfway between 1 and 2 units of 2^-24: odd below, so up).
  const Tensor h2 = Tensor::empty({3}, DType::f16);
  ops::copy_(h2,
             make({65519.0F, -3.0F * std::ldexp(1.0F, -25), 5.0F * std::ldexp(1.0F, -25)}, {3}));
  EXPECT_EQ(h2.to_floats(), (std::vector<float>{65504.0F, -2.0F * sub, 2.0F * sub}));
  // i32 -> i64 with broadcast, and f32 -> i64 truncating toward zero.
  const Tensor i = Tensor::empty({2, 2}, DType::i64);
  ops::copy_(i, Tensor::from_ints({-3, 4}, {2}, DType::i32));
  EXPECT_EQ(i.to_ints(), (std::vector<std::int64_t>{-3, 4, -3, 4}));
  ops::copy_(i, make({1.75F, -1.75F, 3.0F, -0.5F}, {2, 2}));
  EXPECT_EQ(i.to_ints(), (std::vector<std::int64_t>{1, -1, 3, 0}));
}

// ---- index_copy_ ------------------------------------------------------------

TEST(ops_index_copy, writes_rows_at_index) {
  std::mt19937 rng(96);
  const std::int64_t rows = 8, h = 2, d = 3;
  auto cache = sgtest::random_floats(rng, rows * h * d);
  const Tensor dst = make(cache, {rows, h, d});
  const std::pair<std::int64_t, std::int64_t> writes[] = {{0, 1}, {3, 2}, {5, 3}, {7, 1}, {2, 0}};
  for (const auto& [index, n] : writes) {
    SCOPED_TRACE("index " + std::to_string(index) + " rows " + std::to_string(n));
    const auto src = sgtest::random_floats(rng, n * h * d);
    const Tensor out = ops::index_copy_(dst, index, make(src, {n, h, d}));
    EXPECT_EQ(out.data_ptr(), dst.data_ptr());
    std::copy(src.begin(), src.end(), cache.begin() + index * h * d);
    EXPECT_EQ(dst.to_floats(), cache);
  }
}

TEST(ops_index_copy, strided_source_and_destination_view) {
  std::mt19937 rng(97);
  // dst: the k half of a [6, 2, 4] buffer, a strided view [6, 2, 2].
  auto buf = sgtest::random_floats(rng, 6 * 2 * 4);
  const Tensor all = make(buf, {6, 2, 4});
  const Tensor dst = ops::slice(all, 2, 2, 4);
  // src: [2, 2, 2] as a permute of a [2, 2, 2] tensor.
  const auto sb = sgtest::random_floats(rng, 8);
  const Tensor src = ops::permute(make(sb, {2, 2, 2}), {1, 0, 2});
  const auto sv = ref::permute(sb, {2, 2, 2}, {1, 0, 2});
  ops::index_copy_(dst, 4, src);
  for (std::int64_t r = 0; r < 2; ++r) {
    for (std::int64_t hh = 0; hh < 2; ++hh) {
      for (std::int64_t c = 0; c < 2; ++c) {
        buf[static_cast<std::size_t>(((4 + r) * 2 + hh) * 4 + 2 + c)] =
            sv[static_cast<std::size_t>((r * 2 + hh) * 2 + c)];
      }
    }
  }
  EXPECT_EQ(all.to_floats(), buf);
}

// ---- fill_ and factories -------------------------------------------------

TEST(ops_fill, fills_views_and_dtypes) {
  const Tensor x = make(iota(12), {3, 4});
  ops::fill_(ops::slice(x, 1, 1, 4, 2), -2.5);
  EXPECT_EQ(x.to_floats(),
            (std::vector<float>{0, -2.5F, 2, -2.5F, 4, -2.5F, 6, -2.5F, 8, -2.5F, 10, -2.5F}));
  const Tensor i = Tensor::from_ints({1, 2, 3}, {3});
  ops::fill_(i, 42.0);
  EXPECT_EQ(i.to_ints(), (std::vector<std::int64_t>{42, 42, 42}));
  const Tensor h = Tensor::empty({2, 2}, DType::f16);
  ops::fill_(h, 0.1);
  EXPECT_EQ(h.to_floats(), std::vector<float>(4, 0.0999755859375F));
  const Tensor e = Tensor::empty({0, 3}, DType::f32);
  EXPECT_TRUE(ops::fill_(e, 1.0).to_floats().empty());
}

TEST(ops_factories, full_zeros_arange) {
  const Tensor f = ops::full({2, 3}, 1.5);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(sgtest::dims_of(f), (Dims{2, 3}));
  EXPECT_EQ(f.to_floats(), std::vector<float>(6, 1.5F));
  EXPECT_EQ(ops::full({4}, -3.0, DType::i32).to_ints(),
            (std::vector<std::int64_t>{-3, -3, -3, -3}));
  EXPECT_EQ(ops::full({2}, 3.0, DType::bf16).to_floats(), (std::vector<float>{3.0F, 3.0F}));
  EXPECT_EQ(ops::full({}, 7.0).to_floats(), (std::vector<float>{7.0F}));
  const Tensor z = ops::zeros({2, 0, 3});
  EXPECT_EQ(sgtest::dims_of(z), (Dims{2, 0, 3}));
  EXPECT_TRUE(z.to_floats().empty());
  EXPECT_EQ(ops::zeros({3}, DType::i64).to_ints(), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(ops::zeros({2, 2}, DType::f16).to_floats(), std::vector<float>(4, 0.0F));
  const Tensor a = ops::arange(5);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_ints(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ops::arange(4, DType::f32).to_floats(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(ops::arange(3, DType::i32).to_ints(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(ops::arange(3, DType::f16).to_floats(), (std::vector<float>{0, 1, 2}));
  EXPECT_TRUE(ops::arange(0).to_ints().empty());
}

}  // namespace

TEST(ops_views, narrow_with_negative_start_counts_from_the_end) {
  const sinkgraph::Tensor x = sinkgraph::Tensor::from_floats({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  const sinkgraph::Tensor n = sinkgraph::ops::narrow(x, 1, -2, 2);
  EXPECT_EQ(n.shape(), (sinkgraph::Shape{2, 2}));
  EXPECT_EQ(n.to_floats(), (std::vector<float>{2, 3, 6, 7}));
}

namespace {

// squeeze / unsqueeze are views of any layout: a write through them lands in
// the base (the PyTorch front end's select writes a KV-cache row this way).
TEST(ops_views, squeeze_and_unsqueeze_keep_strides_and_share_memory) {
  std::vector<float> base(4 * 3);
  for (std::size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i);
  const Tensor x = make(base, {4, 3});
  const Tensor col = ops::slice(x, 1, 1, 2, 1);  // [4, 1], stride (3, 1): not contiguous
  const Tensor flat = ops::squeeze(col, -1);     // [4], stride 3
  EXPECT_EQ(sgtest::dims_of(flat), (Dims{4}));
  EXPECT_EQ(flat.strides()[0], 3);
  EXPECT_EQ(flat.to_floats(), (std::vector<float>{1, 4, 7, 10}));
  const Tensor back = ops::unsqueeze(flat, 0);  // [1, 4]
  EXPECT_EQ(sgtest::dims_of(back), (Dims{1, 4}));
  EXPECT_EQ(back.to_floats(), (std::vector<float>{1, 4, 7, 10}));
  const Tensor row = ops::squeeze(ops::slice(x, 0, 2, 3, 1), 0);  // x[2]
  (void)ops::copy_(row, Tensor::from_floats({-1, -2, -3}, {3}));
  EXPECT_EQ(x.to_floats()[6], -1.0F);
  EXPECT_EQ(x.to_floats()[8], -3.0F);
  EXPECT_THROW((void)ops::squeeze(x, 0), sinkgraph::Error);  // size 4, not 1
  EXPECT_THROW((void)ops::unsqueeze(x, 3), sinkgraph::Error);
  EXPECT_EQ(sgtest::dims_of(ops::unsqueeze(x, -1)), (Dims{4, 3, 1}));
}

}  // namespace
