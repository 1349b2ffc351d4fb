// Elementwise operators, matmul and linear against the naive references.
#include "sinkgraph/ops.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/tensor.h"
#include "thread_count.h"

namespace {

using sinkgraph::DType;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::all_close;
using sgtest::Dims;
using sgtest::make;

// Tolerances (|got - want| <= atol + rtol * |want|):
// + - * / in f32 round once, exactly as the reference's float result: exact.
constexpr double kExact = 0.0;
// exp/sqrt/silu/gelu: libm float vs the double reference, a few ulp.
constexpr double kUnaryRtol = 1e-6;
constexpr double kUnaryAtol = 1e-7;
// matmul/linear: BLAS sums in another order (and blocks) than the reference.
constexpr double kMatmulRtol = 1e-4;
constexpr double kMatmulAtol = 1e-5;
// f16 output rounding is 2^-11 relative, bf16 2^-8; inputs are compared on
// their rounded values, so only the output rounding (and f32 math) remains.
constexpr double kF16Rtol = 1e-3;
constexpr double kBF16Rtol = 8e-3;
constexpr double kHalfAtol = 1e-4;

double half_rtol(DType d) { return d == DType::f16 ? kF16Rtol : kBF16Rtol; }

struct BinaryCase {
  Dims a, b;
};

// Broadcasting, size-1 dims, 0-sized dims, a 0-d operand and equal shapes.
const BinaryCase kBinaryCases[] = {
    {{3, 1, 4}, {2, 4}}, {{2, 3}, {2, 3}},       {{5}, {1}},       {{1, 3, 1}, {4, 1, 5}},
    {{}, {2, 3}},        {{2, 0, 3}, {3}},       {{4, 1}, {1, 0}}, {{7, 1, 1, 2}, {1, 6, 2}},
    {{1}, {1}},          {{2, 3, 4}, {2, 1, 1}},
};

template <typename Op>
void check_binary(const char* name, Tensor (*fn)(const Tensor&, const Tensor&), Op op,
                  bool positive_b) {
  std::mt19937 rng(42);
  for (const auto& c : kBinaryCases) {
    SCOPED_TRACE(std::string(name) + " " + sgtest::str(c.a) + " with " + sgtest::str(c.b));
    const auto va = sgtest::random_floats(rng, ref::numel(c.a), -2.0F, 2.0F);
    const auto vb = sgtest::random_floats(rng, ref::numel(c.b), positive_b ? 0.5F : -2.0F, 2.0F);
    const Tensor out = fn(make(va, c.a), make(vb, c.b));
    EXPECT_EQ(sgtest::dims_of(out), ref::broadcast(c.a, c.b));
    EXPECT_EQ(out.dtype(), DType::f32);
    const auto want = ref::binary(va, c.a, vb, c.b, op);
    EXPECT_TRUE(all_close(out.to_floats(), want, kExact, kExact));
    // Operands swapped: broadcasting is symmetric, the operation need not be.
    const auto want_swapped = ref::binary(vb, c.b, va, c.a, op);
    if (!positive_b) {
      EXPECT_TRUE(
          all_close(fn(make(vb, c.b), make(va, c.a)).to_floats(), want_swapped, kExact, kExact));
    }
  }
}

TEST(ops_elementwise, add_broadcasts) {
  check_binary(
      "add", ops::add, [](float x, float y) { return x + y; }, false);
}
TEST(ops_elementwise, sub_broadcasts) {
  check_binary(
      "sub", ops::sub, [](float x, float y) { return x - y; }, false);
}
TEST(ops_elementwise, mul_broadcasts) {
  check_binary(
      "mul", ops::mul, [](float x, float y) { return x * y; }, false);
}
TEST(ops_elementwise, div_broadcasts) {
  check_binary(
      "div", ops::div, [](float x, float y) { return x / y; }, true);
}

TEST(ops_elementwise, binary_on_non_contiguous_views) {
  std::mt19937 rng(7);
  // a: transpose of a [5,4] base -> [4,5]; b: every other row of a [8,5] base -> [4,5].
  const auto base_a = sgtest::random_floats(rng, 20);
  const auto base_b = sgtest::random_floats(rng, 40);
  const Tensor a = ops::transpose(make(base_a, {5, 4}), 0, 1);
  const Tensor b = ops::slice(make(base_b, {8, 5}), 0, 0, 8, 2);
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  const auto va = ref::permute(base_a, {5, 4}, {1, 0});
  const auto vb = ref::slice(base_b, {8, 5}, 0, 0, 8, 2);
  EXPECT_TRUE(all_close(ops::add(a, b).to_floats(),
                        ref::binary(va, {4, 5}, vb, {4, 5}, [](float x, float y) { return x + y; }),
                        kExact, kExact));
  EXPECT_TRUE(all_close(ops::mul(a, b).to_floats(),
                        ref::binary(va, {4, 5}, vb, {4, 5}, [](float x, float y) { return x * y; }),
                        kExact, kExact));
  // A strided view broadcast against a column: [4,5] - [4,1] (a column slice of b).
  const Tensor col = ops::slice(b, 1, 2, 3);
  const auto vcol = ref::slice(vb, {4, 5}, 1, 2, 3, 1);
  EXPECT_TRUE(
      all_close(ops::sub(a, col).to_floats(),
                ref::binary(va, {4, 5}, vcol, {4, 1}, [](float x, float y) { return x - y; }),
                kExact, kExact));
}

TEST(ops_elementwise, binary_integer_dtypes) {
  for (const DType dt : {DType::i64, DType::i32}) {
    const Tensor a = Tensor::from_ints({1, -2, 3, 40000, 5, -6}, {2, 3}, dt);
    const Tensor b = Tensor::from_ints({10, 20, -30}, {3}, dt);
    const Tensor sum = ops::add(a, b);
    EXPECT_EQ(sum.dtype(), dt);
    EXPECT_EQ(sum.to_ints(), (std::vector<std::int64_t>{11, 18, -27, 40010, 25, -36}));
    EXPECT_EQ(ops::sub(a, b).to_ints(), (std::vector<std::int64_t>{-9, -22, 33, 39990, -15, 24}));
    EXPECT_EQ(ops::mul(a, b).to_ints(),
              (std::vector<std::int64_t>{10, -40, -90, 400000, 100, 180}));
  }
  // i64 holds values f32 cannot represent exactly.
  const std::int64_t big = (std::int64_t{1} << 40) + 1;
  const Tensor a = Tensor::from_ints({big}, {1});
  EXPECT_EQ(ops::add(a, a).to_ints(), (std::vector<std::int64_t>{2 * big}));
}

// Note [A broadcast row] (elementwise.cpp): an operand with the output's
// trailing dims against one of its whole shape runs block by block across the
// compute threads. Large enough to split, in both operand orders (sub and div
// are not symmetric), with leading ones, a scalar, a half dtype and i64
// values f32 cannot hold; each equal to the reference elementwise.
TEST(ops_elementwise, a_broadcast_row_on_one_and_two_threads) {
  std::mt19937 rng(8);
  const sgtest::ThreadCount restore;
  const std::vector<BinaryCase> cases = {{{300, 384}, {384}},       {{2, 50, 7, 96}, {96}},
                                         {{40, 3, 96}, {1, 1, 96}}, {{100000}, {1}},
                                         {{3, 4000}, {1, 1}},       {{64, 9, 33}, {9, 33}}};
  const auto sub = [](float x, float y) { return x - y; };
  const auto div = [](float x, float y) { return x / y; };
  for (const int threads : {1, 2}) {
    sinkgraph::set_num_threads(threads);
    for (const auto& c : cases) {
      SCOPED_TRACE(sgtest::str(c.a) + " with " + sgtest::str(c.b) + ", threads " +
                   std::to_string(threads));
      const auto va = sgtest::random_floats(rng, ref::numel(c.a), -2.0F, 2.0F);
      const auto vb = sgtest::random_floats(rng, ref::numel(c.b), 0.5F, 2.0F);
      const Tensor a = make(va, c.a);
      const Tensor b = make(vb, c.b);
      EXPECT_TRUE(all_close(ops::sub(a, b).to_floats(), ref::binary(va, c.a, vb, c.b, sub), kExact,
                            kExact));
      EXPECT_TRUE(all_close(ops::div(b, a).to_floats(), ref::binary(vb, c.b, va, c.a, div), kExact,
                            kExact));
      // bf16: the op on the rounded values, rounded once.
      std::vector<float> ra, rb;
      const Tensor ha = make(va, c.a, DType::bf16, &ra);
      const Tensor hb = make(vb, c.b, DType::bf16, &rb);
      const Tensor got = ops::sub(hb, ha);
      EXPECT_EQ(got.dtype(), DType::bf16);
      const auto want =
          make(ref::binary(rb, c.b, ra, c.a, sub), ref::broadcast(c.a, c.b), DType::bf16);
      EXPECT_EQ(got.to_floats(), want.to_floats());
    }
  }
  // i64 past f32's integers, the row second and first.
  const std::int64_t big = (std::int64_t{1} << 40) + 1;
  std::vector<std::int64_t> full(4 * 20000);
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = big + static_cast<std::int64_t>(i);
  const Tensor a = Tensor::from_ints(full, {20000, 4});
  const Tensor row = Tensor::from_ints({big, -big, 3, -1}, {4});
  const auto rv = row.to_ints();
  for (const int threads : {1, 2}) {
    sinkgraph::set_num_threads(threads);
    const auto sum = ops::add(a, row).to_ints();
    const auto diff = ops::sub(row, a).to_ints();
    for (std::size_t i = 0; i < full.size(); ++i) {
      const std::int64_t r = rv[i % 4];
      ASSERT_EQ(sum[i], full[i] + r) << i;
      ASSERT_EQ(diff[i], r - full[i]) << i;
    }
  }
}

// Note [Coalesced rows] (common.h): broadcasts that are not a trailing block
// (a squeeze-and-excitation scale [N, C, 1, 1], a column [R, 1], a middle
// dim of one) and views whose dims merge run as long rows split across the
// compute threads; a permuted operand keeps its strided rows. Large enough
// to split, both operand orders, f32 and bf16; each equal to the reference
// elementwise, on one thread and on two.
TEST(ops_elementwise, coalesced_rows_on_one_and_two_threads) {
  std::mt19937 rng(9);
  const sgtest::ThreadCount restore;
  const std::vector<BinaryCase> cases = {{{2, 96, 56, 56}, {1, 96, 1, 1}},
                                         {{96, 3000}, {96, 1}},
                                         {{4, 7, 5000}, {4, 1, 5000}},
                                         {{3, 1, 40, 1, 700}, {3, 5, 40, 1, 1}}};
  const auto sub = [](float x, float y) { return x - y; };
  const auto mul = [](float x, float y) { return x * y; };
  for (const int threads : {1, 2}) {
    sinkgraph::set_num_threads(threads);
    for (const auto& c : cases) {
      SCOPED_TRACE(sgtest::str(c.a) + " with " + sgtest::str(c.b) + ", threads " +
                   std::to_string(threads));
      const auto va = sgtest::random_floats(rng, ref::numel(c.a), -2.0F, 2.0F);
      const auto vb = sgtest::random_floats(rng, ref::numel(c.b), 0.5F, 2.0F);
      const Tensor a = make(va, c.a);
      const Tensor b = make(vb, c.b);
      EXPECT_EQ(ops::mul(a, b).to_floats(), ref::binary(va, c.a, vb, c.b, mul));
      EXPECT_EQ(ops::sub(b, a).to_floats(), ref::binary(vb, c.b, va, c.a, sub));
      std::vector<float> ra, rb;
      const Tensor ha = make(va, c.a, DType::bf16, &ra);
      const Tensor hb = make(vb, c.b, DType::bf16, &rb);
      const auto want =
          make(ref::binary(rb, c.b, ra, c.a, sub), ref::broadcast(c.a, c.b), DType::bf16);
      EXPECT_EQ(ops::sub(hb, ha).to_floats(), want.to_floats());
    }
    // Views: a slice of rows merges into one row per kept block; a
    // transposed operand stays strided, against a contiguous one and alone.
    SCOPED_TRACE("views, threads " + std::to_string(threads));
    const auto base = sgtest::random_floats(rng, 6 * 200 * 300, -2.0F, 2.0F);
    const Tensor full = make(base, {6, 200, 300});
    const Tensor rows = ops::slice(full, 0, 1, 5);  // [4, 200, 300], contiguous blocks
    const auto vrows = ref::slice(base, {6, 200, 300}, 0, 1, 5, 1);
    const Tensor t = ops::transpose(rows, 1, 2);  // [4, 300, 200]
    const auto vt = ref::permute(vrows, {4, 200, 300}, {0, 2, 1});
    const auto other = sgtest::random_floats(rng, 4 * 300 * 200, 0.5F, 2.0F);
    const Tensor o = make(other, {4, 300, 200});
    EXPECT_EQ(ops::mul(t, o).to_floats(),
              ref::binary(vt, {4, 300, 200}, other, {4, 300, 200}, mul));
    const auto neg = [](float x) { return -x; };
    EXPECT_EQ(ops::neg(rows).to_floats(), ref::unary(vrows, neg));
    EXPECT_EQ(ops::neg(t).to_floats(), ref::unary(vt, neg));
  }
}

// torch.eq, ne, lt, le, gt, ge against a naive loop over every pair: floats
// with NaN, infinities and signed zeros, broadcast; integers past 2^53 (not
// compared through double); bf16 as its f32 values; a strided operand.
TEST(ops_elementwise, compare_matches_each_pair_as_ieee_and_torch_do) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  const std::vector<float> xs = {-inf, -1.5F, -0.0F, 0.0F, 2.0F, inf, nan};
  const Tensor a = Tensor::from_floats(xs, {7, 1});
  const Tensor b = Tensor::from_floats(xs, {1, 7});
  using C = ops::Comparison;
  const auto want = [](C op, auto x, auto y) {
    switch (op) {
      case C::eq:
        return x == y;
      case C::ne:
        return x != y;
      case C::lt:
        return x < y;
      case C::le:
        return x <= y;
      case C::gt:
        return x > y;
      case C::ge:
        return x >= y;
    }
    return false;
  };
  for (const C op : {C::eq, C::ne, C::lt, C::le, C::gt, C::ge}) {
    const Tensor out = ops::compare(a, b, op);
    ASSERT_EQ(out.dtype(), DType::boolean);
    ASSERT_EQ(out.shape(), sinkgraph::Shape({7, 7}));
    const std::vector<std::int64_t> got = out.to_ints();
    for (std::size_t i = 0; i < 7; ++i) {
      for (std::size_t j = 0; j < 7; ++j) {
        EXPECT_EQ(got[i * 7 + j] != 0, want(op, xs[i], xs[j]))
            << static_cast<int>(op) << " " << xs[i] << " " << xs[j];
      }
    }
    // The same through a transposed (strided) operand and in bf16.
    const std::vector<std::int64_t> t =
        ops::compare(ops::transpose(ops::expand(b, {7, 7}), 0, 1),
                     ops::transpose(ops::expand(a, {7, 7}), 0, 1), op)
            .to_ints();
    for (std::size_t i = 0; i < 7; ++i) {
      for (std::size_t j = 0; j < 7; ++j) {
        EXPECT_EQ(t[i * 7 + j] != 0, want(op, xs[i], xs[j])) << "strided";
      }
    }
    const std::vector<std::int64_t> h =
        ops::compare(Tensor::from_floats(xs, {7, 1}, DType::bf16),
                     Tensor::from_floats(xs, {1, 7}, DType::bf16), op)
            .to_ints();
    EXPECT_EQ(h, got) << "bf16";
  }
  const std::int64_t big = (std::int64_t{1} << 60) + 1;
  const Tensor ia = Tensor::from_ints({big, big - 1, -3}, {3});
  const Tensor ib = Tensor::from_ints({big - 1}, {1});
  EXPECT_EQ(ops::compare(ia, ib, C::eq).to_ints(), (std::vector<std::int64_t>{0, 1, 0}));
  EXPECT_EQ(ops::compare(ia, ib, C::gt).to_ints(), (std::vector<std::int64_t>{1, 0, 0}));
  const Tensor flags = Tensor::from_ints({0, 1}, {2}, DType::boolean);
  EXPECT_EQ(ops::compare(flags, Tensor::from_ints({1}, {1}, DType::boolean), C::ne).to_ints(),
            (std::vector<std::int64_t>{1, 0}));
  EXPECT_THROW((void)ops::compare(a, ia, C::eq), sinkgraph::Error);  // two dtypes
  EXPECT_THROW((void)ops::compare(ia, Tensor::from_ints({1, 2}, {2}), C::lt),
               sinkgraph::Error);  // shapes do not broadcast
  EXPECT_THROW((void)ops::compare(a, b, static_cast<C>(6)), sinkgraph::Error);
}

// torch.where: cond broadcast against both operands, elements copied as they
// are (-inf and NaN pass through), in floating and integer dtypes; a strided
// cond (a transposed view) is read through its strides.
TEST(ops_elementwise, where_broadcasts_and_copies_elements_exactly) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor cond = Tensor::from_ints({1, 0, 0, 1, 1, 0}, {2, 1, 3}, DType::boolean);
  const Tensor a = Tensor::from_floats({0.0F, -inf}, {1, 2, 1});
  const Tensor b = Tensor::from_floats({std::nanf(""), 7.5F, -1.0F}, {3});
  const Tensor out = ops::where(cond, a, b);
  ASSERT_EQ(out.shape(), sinkgraph::Shape({2, 2, 3}));
  const std::vector<float> got = out.to_floats();
  // [c][r][k] = cond[c][k] ? a[r] : b[k]
  for (int c = 0; c < 2; ++c) {
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < 3; ++k) {
        const bool pick = cond.to_ints()[static_cast<std::size_t>(c * 3 + k)] != 0;
        const float want = pick ? a.to_floats()[static_cast<std::size_t>(r)]
                                : b.to_floats()[static_cast<std::size_t>(k)];
        const float v = got[static_cast<std::size_t>((c * 2 + r) * 3 + k)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(v)) << c << r << k;
        } else {
          EXPECT_EQ(v, want) << c << r << k;
        }
      }
    }
  }
  const Tensor ia = Tensor::from_ints({(std::int64_t{1} << 40) + 1, 2}, {2});
  const Tensor ib = Tensor::from_ints({-3}, {1});
  const Tensor square = Tensor::from_ints({1, 0, 0, 1}, {2, 2}, DType::boolean);
  EXPECT_EQ(ops::where(ops::transpose(square, 0, 1), ia, ib).to_ints(),
            (std::vector<std::int64_t>{(std::int64_t{1} << 40) + 1, -3, -3, 2}));
  EXPECT_EQ(ops::where(Tensor::from_ints({0, 1}, {2, 1}, DType::boolean), ia, ib).to_ints(),
            (std::vector<std::int64_t>{-3, -3, (std::int64_t{1} << 40) + 1, 2}));
  const Tensor half = ops::where(cond, Tensor::from_floats({1.5F}, {1}, DType::bf16),
                                 Tensor::from_floats({-2.0F}, {1}, DType::bf16));
  EXPECT_EQ(half.dtype(), DType::bf16);
  EXPECT_EQ(half.to_floats(), (std::vector<float>{1.5F, -2.0F, -2.0F, 1.5F, 1.5F, -2.0F}));
  EXPECT_THROW((void)ops::where(a, a, b), sinkgraph::Error);      // cond not bool
  EXPECT_THROW((void)ops::where(cond, a, ia), sinkgraph::Error);  // two dtypes
  EXPECT_THROW((void)ops::where(cond, Tensor::from_floats({1, 2, 3, 4}, {4}), b),
               sinkgraph::Error);  // 4 against 3
}

TEST(ops_elementwise, binary_half_dtypes) {
  std::mt19937 rng(3);
  for (const DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(sinkgraph::dtype_name(dt)));
    std::vector<float> sa, sb;
    const Tensor a = make(sgtest::random_floats(rng, 24, -4.0F, 4.0F), {2, 3, 4}, dt, &sa);
    const Tensor b = make(sgtest::random_floats(rng, 4, 0.5F, 3.0F), {4}, dt, &sb);
    const Tensor sum = ops::add(a, b);
    EXPECT_EQ(sum.dtype(), dt);
    EXPECT_TRUE(all_close(sum.to_floats(), ref::binary(sa, {2, 3, 4}, sb, {4}, std::plus<float>()),
                          half_rtol(dt), kHalfAtol));
    EXPECT_TRUE(all_close(ops::mul(a, b).to_floats(),
                          ref::binary(sa, {2, 3, 4}, sb, {4}, std::multiplies<float>()),
                          half_rtol(dt), kHalfAtol));
    EXPECT_TRUE(all_close(ops::div(a, b).to_floats(),
                          ref::binary(sa, {2, 3, 4}, sb, {4}, std::divides<float>()), half_rtol(dt),
                          kHalfAtol));
  }
}

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double (*want)(double);
  float lo, hi;
  double atol = kUnaryAtol;
};

const UnaryCase kUnary[] = {
    {"neg", ops::neg, [](double x) { return -x; }, -3.0F, 3.0F},
    {"exp", ops::exp, [](double x) { return std::exp(x); }, -5.0F, 5.0F},
    {"sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.0F, 9.0F},
    {"rsqrt", ops::rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 0.01F, 9.0F},
    // erf is Abramowitz & Stegun 7.1.26 (vec::erf, as ATen's vectorized
    // erf): absolute error below 5e-7; GELU's x / 2 scales it (torch's own
    // GELU measured 1.1e-6 against float64 on [197, 1024] values).
    {"erf", ops::erf, [](double x) { return std::erf(x); }, -3.0F, 3.0F, 5e-7},
    {"relu", ops::relu, [](double x) { return x > 0 ? x : 0.0; }, -3.0F, 3.0F},
    {"silu", ops::silu, ref::silu, -8.0F, 8.0F},
    {"gelu", ops::gelu, ref::gelu, -5.0F, 5.0F, 5.0 / 2 * 5e-7},
    {"tanh", ops::tanh, [](double x) { return std::tanh(x); }, -4.0F, 4.0F},
    {"sigmoid", ops::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -8.0F, 8.0F},
    // torch.nn.functional.hardswish / hardsigmoid, written out piecewise.
    {"hardswish", ops::hardswish,
     [](double x) { return x <= -3  ? 0.0
                           : x >= 3 ? x
                                    : x * (x + 3) / 6; }, -5.0F, 5.0F},
    {"hardsigmoid", ops::hardsigmoid,
     [](double x) { return x <= -3  ? 0.0
                           : x >= 3 ? 1.0
                                    : x / 6 + 0.5; }, -5.0F, 5.0F},
    // Rotary embeddings' cos and sin of position * frequency: wide arguments.
    {"cos", ops::cos, [](double x) { return std::cos(x); }, -300.0F, 300.0F},
    {"sin", ops::sin, [](double x) { return std::sin(x); }, -300.0F, 300.0F},
};

const Dims kUnaryShapes[] = {{17}, {3, 1, 5}, {1}, {}, {2, 0, 4}, {4, 6, 3}};

TEST(ops_elementwise, unary_random_shapes) {
  std::mt19937 rng(11);
  for (const auto& u : kUnary) {
    for (const auto& shape : kUnaryShapes) {
      SCOPED_TRACE(std::string(u.name) + " " + sgtest::str(shape));
      const auto v = sgtest::random_floats(rng, ref::numel(shape), u.lo, u.hi);
      const Tensor out = u.fn(make(v, shape));
      EXPECT_EQ(sgtest::dims_of(out), shape);
      EXPECT_TRUE(all_close(out.to_floats(), ref::unary(v, u.want), kUnaryRtol, u.atol));
    }
  }
}

TEST(ops_elementwise, unary_on_non_contiguous_views) {
  std::mt19937 rng(12);
  for (const auto& u : kUnary) {
    SCOPED_TRACE(u.name);
    const auto base = sgtest::random_floats(rng, 3 * 4 * 5, u.lo, u.hi);
    // permute [3,4,5] -> [5,3,4], then take every other element of the last dim.
    const Tensor x = ops::slice(ops::permute(make(base, {3, 4, 5}), {2, 0, 1}), 2, 1, 4, 2);
    const auto v = ref::slice(ref::permute(base, {3, 4, 5}, {2, 0, 1}), {5, 3, 4}, 2, 1, 4, 2);
    const Tensor out = u.fn(x);
    EXPECT_EQ(sgtest::dims_of(out), (Dims{5, 3, 2}));
    EXPECT_TRUE(all_close(out.to_floats(), ref::unary(v, u.want), kUnaryRtol, u.atol));
  }
}

// Note [A NaN passes through relu and clamp]: as torch, relu, hardsigmoid
// and hardswish give NaN for NaN, and relu keeps -0.0 (torch.relu(-0.0) is
// -0.0); every lane position and the tail (33 values).
TEST(ops_elementwise, nan_and_negative_zero_pass_through_as_in_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(33, 1.5F);
  for (std::size_t i = 0; i < v.size(); i += 4) v[i] = nan;
  for (std::size_t i = 1; i < v.size(); i += 8) v[i] = -0.0F;
  v[2] = inf;
  v[3] = -inf;
  const auto relu = ops::relu(make(v, {33})).to_floats();
  const auto hsig = ops::hardsigmoid(make(v, {33})).to_floats();
  const auto hswish = ops::hardswish(make(v, {33})).to_floats();
  for (std::size_t i = 0; i < v.size(); ++i) {
    SCOPED_TRACE(i);
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(relu[i]));
      EXPECT_TRUE(std::isnan(hsig[i]));
      EXPECT_TRUE(std::isnan(hswish[i]));
    } else if (v[i] == 0.0F) {
      EXPECT_EQ(relu[i], 0.0F);
      EXPECT_TRUE(std::signbit(relu[i]));
      EXPECT_EQ(hsig[i], 0.5F);
      EXPECT_EQ(hswish[i], 0.0F);
      EXPECT_TRUE(std::signbit(hswish[i]));  // -0 * 3 / 6
    }
  }
  EXPECT_EQ(relu[2], inf);
  EXPECT_EQ(relu[3], 0.0F);
  EXPECT_EQ(hsig[2], 1.0F);
  EXPECT_EQ(hsig[3], 0.0F);
  EXPECT_EQ(hswish[2], inf);
  EXPECT_TRUE(std::isnan(hswish[3]));  // -inf * 0, as torch
}

TEST(ops_elementwise, gelu_is_erf_exact_not_tanh) {
  // Phi(1) = 0.841344746...; the tanh approximation gives 0.841192.
  const auto out = ops::gelu(make({1.0F, -1.0F, 3.0F, 0.0F}, {4})).to_floats();
  EXPECT_NEAR(out[0], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(out[1], -0.15865525393145707, 1e-6);
  EXPECT_NEAR(out[2], 2.995950077712334, 1e-6);
  EXPECT_EQ(out[3], 0.0F);
}

TEST(ops_elementwise, scalar_ops) {
  std::mt19937 rng(13);
  for (const auto& shape : kUnaryShapes) {
    SCOPED_TRACE(sgtest::str(shape));
    const auto v = sgtest::random_floats(rng, ref::numel(shape), -3.0F, 3.0F);
    const Tensor x = make(v, shape);
    EXPECT_TRUE(all_close(ops::add_scalar(x, 1.25).to_floats(),
                          ref::unary(v, [](double a) { return float(a) + 1.25F; }), kExact,
                          kExact));
    EXPECT_TRUE(all_close(ops::mul_scalar(x, -0.5).to_floats(),
                          ref::unary(v, [](double a) { return float(a) * -0.5F; }), kExact,
                          kExact));
  }
  // On a transposed view.
  const auto base = sgtest::random_floats(rng, 6);
  const Tensor xt = ops::transpose(make(base, {2, 3}), 0, 1);
  EXPECT_TRUE(
      all_close(ops::add_scalar(xt, 2.0).to_floats(),
                ref::unary(ref::permute(base, {2, 3}, {1, 0}), [](double a) { return a + 2.0; }),
                kUnaryRtol, kUnaryAtol));
}

TEST(ops_elementwise, unary_half_dtypes) {
  std::mt19937 rng(14);
  for (const DType dt : {DType::f16, DType::bf16}) {
    for (const auto& u : kUnary) {
      SCOPED_TRACE(std::string(u.name) + " " + std::string(sinkgraph::dtype_name(dt)));
      std::vector<float> stored;
      const Tensor x = make(sgtest::random_floats(rng, 30, u.lo, u.hi), {5, 6}, dt, &stored);
      const Tensor out = u.fn(x);
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(all_close(out.to_floats(), ref::unary(stored, u.want), half_rtol(dt), kHalfAtol));
    }
    std::vector<float> stored;
    const Tensor x = make(sgtest::random_floats(rng, 8), {8}, dt, &stored);
    EXPECT_TRUE(all_close(ops::mul_scalar(x, 3.0).to_floats(),
                          ref::unary(stored, [](double a) { return 3.0 * a; }), half_rtol(dt),
                          kHalfAtol));
  }
}

// ---- matmul ---------------------------------------------------------------

struct MatmulCase {
  Dims a, b;
};

TEST(ops_matmul, random_shapes) {
  const MatmulCase cases[] = {
      {{3, 4}, {4, 5}},       {{1, 7}, {7, 3}},       {{17, 33}, {33, 9}},
      {{5, 1}, {1, 6}},       {{2, 3, 4}, {4, 5}},    {{4, 1, 8}, {8, 3}},
      {{3, 5, 6}, {3, 6, 2}}, {{3, 5, 6}, {1, 6, 2}}, {{2, 3, 4, 5}, {2, 1, 5, 3}},
      {{2, 3, 4, 5}, {5, 3}}, {{4, 0}, {0, 3}},       {{0, 4}, {4, 3}},
      {{4, 3}, {3, 0}},       {{2, 1, 64}, {64, 64}},
  };
  std::mt19937 rng(21);
  for (const auto& c : cases) {
    SCOPED_TRACE(sgtest::str(c.a) + " @ " + sgtest::str(c.b));
    const auto va = sgtest::random_floats(rng, ref::numel(c.a));
    const auto vb = sgtest::random_floats(rng, ref::numel(c.b));
    const Tensor out = ops::matmul(make(va, c.a), make(vb, c.b));
    Dims want_shape = c.a;
    want_shape.back() = c.b.back();
    EXPECT_EQ(sgtest::dims_of(out), want_shape);
    EXPECT_TRUE(
        all_close(out.to_floats(), ref::matmul(va, c.a, vb, c.b), kMatmulRtol, kMatmulAtol));
  }
}

// The tiled kernel reads a row-major b in place with at most one tile of
// rows and whole blocks of 16 columns (across a second block of K: resumed
// sums), and packs it otherwise (a partial block, more rows than a tile).
TEST(ops_matmul, tiled_kernel_in_place_and_packed_blocks) {
  const MatmulCase cases[] = {
      {{1, 600}, {600, 48}}, {{6, 530}, {530, 32}}, {{5, 37}, {37, 40}}, {{7, 20}, {20, 32}}};
  std::mt19937 rng(23);
  for (const auto& c : cases) {
    SCOPED_TRACE(sgtest::str(c.a) + " @ " + sgtest::str(c.b));
    const auto va = sgtest::random_floats(rng, ref::numel(c.a));
    const auto vb = sgtest::random_floats(rng, ref::numel(c.b));
    EXPECT_TRUE(all_close(ops::matmul(make(va, c.a), make(vb, c.b)).to_floats(),
                          ref::matmul(va, c.a, vb, c.b), kMatmulRtol, kMatmulAtol));
  }
}

TEST(ops_matmul, transposed_and_strided_operands) {
  std::mt19937 rng(22);
  const std::int64_t m = 6, k = 5, n = 4;
  const auto base_a = sgtest::random_floats(rng, k * m);  // a^T stored [K, M]
  const auto base_b = sgtest::random_floats(rng, n * k);  // b^T stored [N, K]
  const Tensor a = ops::transpose(make(base_a, {k, m}), 0, 1);
  const Tensor b = ops::transpose(make(base_b, {n, k}), 0, 1);
  const auto va = ref::permute(base_a, {k, m}, {1, 0});
  const auto vb = ref::permute(base_b, {n, k}, {1, 0});
  const Tensor a_plain = make(va, {m, k});
  const Tensor b_plain = make(vb, {k, n});
  const auto want = ref::matmul(va, {m, k}, vb, {k, n});
  EXPECT_TRUE(all_close(ops::matmul(a, b).to_floats(), want, kMatmulRtol, kMatmulAtol));
  EXPECT_TRUE(all_close(ops::matmul(a, b_plain).to_floats(), want, kMatmulRtol, kMatmulAtol));
  EXPECT_TRUE(all_close(ops::matmul(a_plain, b).to_floats(), want, kMatmulRtol, kMatmulAtol));
  // One row of a transposed a (M=1: the matrix-vector path) with both b layouts.
  const Tensor row = ops::slice(a, 0, 2, 3);
  const auto vrow = ref::slice(va, {m, k}, 0, 2, 3, 1);
  const auto want_row = ref::matmul(vrow, {1, k}, vb, {k, n});
  EXPECT_TRUE(all_close(ops::matmul(row, b).to_floats(), want_row, kMatmulRtol, kMatmulAtol));
  EXPECT_TRUE(all_close(ops::matmul(row, b_plain).to_floats(), want_row, kMatmulRtol, kMatmulAtol));
  // Columns with a stride (every other column of a wider matrix).
  const auto wide = sgtest::random_floats(rng, m * 2 * k);
  const Tensor a_cols = ops::slice(make(wide, {m, 2 * k}), 1, 0, 2 * k, 2);
  const auto va_cols = ref::slice(wide, {m, 2 * k}, 1, 0, 2 * k, 2);
  EXPECT_TRUE(all_close(ops::matmul(a_cols, b).to_floats(),
                        ref::matmul(va_cols, {m, k}, vb, {k, n}), kMatmulRtol, kMatmulAtol));
}

TEST(ops_matmul, batched_non_contiguous_operands) {
  std::mt19937 rng(23);
  // a: [B, M, K] made by permuting a [M, B, K] base; b: [B, K, N] transposed from [B, N, K].
  const std::int64_t bs = 3, m = 4, k = 6, n = 5;
  const auto base_a = sgtest::random_floats(rng, m * bs * k);
  const auto base_b = sgtest::random_floats(rng, bs * n * k);
  const Tensor a = ops::permute(make(base_a, {m, bs, k}), {1, 0, 2});
  const Tensor b = ops::transpose(make(base_b, {bs, n, k}), 1, 2);
  const auto va = ref::permute(base_a, {m, bs, k}, {1, 0, 2});
  const auto vb = ref::permute(base_b, {bs, n, k}, {0, 2, 1});
  EXPECT_TRUE(all_close(ops::matmul(a, b).to_floats(), ref::matmul(va, {bs, m, k}, vb, {bs, k, n}),
                        kMatmulRtol, kMatmulAtol));
  // Batched a with a shared 2-D b (the folded path), a still non-contiguous.
  const auto vb2 = sgtest::random_floats(rng, k * n);
  EXPECT_TRUE(all_close(ops::matmul(a, make(vb2, {k, n})).to_floats(),
                        ref::matmul(va, {bs, m, k}, vb2, {k, n}), kMatmulRtol, kMatmulAtol));
}

TEST(ops_matmul, size_one_batch_dim_with_unusual_stride) {
  // a = base[2, 2, M, K][:, 0:1:2] has shape [2, 1, M, K] and strides
  // [2MK, 2MK, K, 1]: its two batches are 2MK apart, not MK, so its rows
  // cannot be folded into one [2M, K] matrix.
  std::mt19937 rng(24);
  const std::int64_t m = 3, k = 4, n = 2;
  const auto base = sgtest::random_floats(rng, 2 * 2 * m * k);
  const Tensor a = ops::slice(make(base, {2, 2, m, k}), 1, 0, 1, 2);
  const auto va = ref::slice(base, {2, 2, m, k}, 1, 0, 1, 2);
  const auto vb = sgtest::random_floats(rng, k * n);
  EXPECT_TRUE(all_close(ops::matmul(a, make(vb, {k, n})).to_floats(),
                        ref::matmul(va, {2, 1, m, k}, vb, {k, n}), kMatmulRtol, kMatmulAtol));
}

TEST(ops_matmul, half_dtypes) {
  std::mt19937 rng(25);
  for (const DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(sinkgraph::dtype_name(dt)));
    std::vector<float> sa, sb;
    const Tensor a = make(sgtest::random_floats(rng, 2 * 3 * 8), {2, 3, 8}, dt, &sa);
    const Tensor b = make(sgtest::random_floats(rng, 8 * 4), {8, 4}, dt, &sb);
    const Tensor out = ops::matmul(a, b);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_TRUE(all_close(out.to_floats(), ref::matmul(sa, {2, 3, 8}, sb, {8, 4}), half_rtol(dt),
                          kHalfAtol + 1e-3));
  }
}

// ---- linear ---------------------------------------------------------------

TEST(ops_linear, random_shapes) {
  struct Case {
    Dims x;
    std::int64_t n;
  };
  const Case cases[] = {{{1, 16}, 8},
                        {{1, 5}, 1},
                        {{4, 16}, 8},
                        {{2, 3, 7}, 5},
                        {{1, 1, 9}, 4},
                        {{3, 0}, 4},
                        {{0, 6}, 4},
                        {{5, 64}, 33},
                        // one row: the matrix-vector path, with rows left over after blocks of 4
                        {{1, 64}, 67},
                        {{1, 1, 300}, 258},
                        // over 1 MiB of weights: the row-streaming path
                        {{1, 520}, 513},
                        {{1, 1}, 3}};
  std::mt19937 rng(31);
  for (const auto& c : cases) {
    SCOPED_TRACE(sgtest::str(c.x) + " n=" + std::to_string(c.n));
    const std::int64_t k = c.x.back();
    const auto vx = sgtest::random_floats(rng, ref::numel(c.x));
    const auto vw = sgtest::random_floats(rng, c.n * k);
    const Tensor out = ops::linear(make(vx, c.x), make(vw, {c.n, k}));
    Dims want_shape = c.x;
    want_shape.back() = c.n;
    EXPECT_EQ(sgtest::dims_of(out), want_shape);
    EXPECT_TRUE(
        all_close(out.to_floats(), ref::linear(vx, c.x, vw, c.n), kMatmulRtol, kMatmulAtol));
  }
}

TEST(ops_linear, non_contiguous_operands) {
  std::mt19937 rng(32);
  const std::int64_t k = 6, n = 5;
  // w given as the transpose of a [K, N] tensor; x as a slice of a wider tensor.
  const auto base_w = sgtest::random_floats(rng, k * n);
  const Tensor w = ops::transpose(make(base_w, {k, n}), 0, 1);
  const auto vw = ref::permute(base_w, {k, n}, {1, 0});
  const auto base_x = sgtest::random_floats(rng, 4 * 2 * k);
  const Tensor x = ops::slice(make(base_x, {4, 2 * k}), 1, k, 2 * k);
  const auto vx = ref::slice(base_x, {4, 2 * k}, 1, k, 2 * k, 1);
  EXPECT_TRUE(all_close(ops::linear(x, w).to_floats(), ref::linear(vx, {4, k}, vw, n), kMatmulRtol,
                        kMatmulAtol));
  // M = 1 (sgemv) with a strided row and a transposed w.
  const Tensor row = ops::slice(x, 0, 3, 4);
  const auto vrow = ref::slice(vx, {4, k}, 0, 3, 4, 1);
  EXPECT_TRUE(all_close(ops::linear(row, w).to_floats(), ref::linear(vrow, {1, k}, vw, n),
                        kMatmulRtol, kMatmulAtol));
  // w: rows [N, K] taken from the right half of a fused [N, 2K] weight (row stride 2K),
  // with several rows (sgemm) and one row (sgemv).
  const auto fused = sgtest::random_floats(rng, n * 2 * k);
  const Tensor wr = ops::slice(make(fused, {n, 2 * k}), 1, k, 2 * k);
  const auto vwr = ref::slice(fused, {n, 2 * k}, 1, k, 2 * k, 1);
  EXPECT_TRUE(all_close(ops::linear(x, wr).to_floats(), ref::linear(vx, {4, k}, vwr, n),
                        kMatmulRtol, kMatmulAtol));
  EXPECT_TRUE(all_close(ops::linear(row, wr).to_floats(), ref::linear(vrow, {1, k}, vwr, n),
                        kMatmulRtol, kMatmulAtol));
  // x a transposed [K, M] tensor, so its K dim is strided.
  const auto base_xt = sgtest::random_floats(rng, k * 3);
  const Tensor xt = ops::transpose(make(base_xt, {k, 3}), 0, 1);
  const auto vxt = ref::permute(base_xt, {k, 3}, {1, 0});
  const auto vw2 = sgtest::random_floats(rng, n * k);
  EXPECT_TRUE(all_close(ops::linear(xt, make(vw2, {n, k})).to_floats(),
                        ref::linear(vxt, {3, k}, vw2, n), kMatmulRtol, kMatmulAtol));
}

TEST(ops_linear, half_dtypes) {
  std::mt19937 rng(33);
  for (const DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(sinkgraph::dtype_name(dt)));
    for (const std::int64_t m : {1, 3}) {
      std::vector<float> sx, sw;
      const Tensor x = make(sgtest::random_floats(rng, m * 12), {m, 12}, dt, &sx);
      const Tensor w = make(sgtest::random_floats(rng, 7 * 12), {7, 12}, dt, &sw);
      const Tensor out = ops::linear(x, w);
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(all_close(out.to_floats(), ref::linear(sx, {m, 12}, sw, 7), half_rtol(dt),
                            kHalfAtol + 1e-3));
    }
  }
}

}  // namespace
