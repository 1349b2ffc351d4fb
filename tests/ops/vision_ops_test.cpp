// conv2d, batch_norm, max_pool2d, mean and expand against the naive
// references (tests/ops/reference.h), with PyTorch's semantics.
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"

namespace {

using sinkgraph::DType;
using sinkgraph::SymInt;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::all_close;
using sgtest::contains_all;
using sgtest::Dims;
using sgtest::error_of;
using sgtest::make;

// conv2d sums up to a few hundred f32 products of values in [-1, 1] (BLAS
// blocks them in its own order) against a double reference.
constexpr double kConvRtol = 1e-5;
constexpr double kConvAtol = 2e-5;
// batch_norm and mean: a few f32 roundings against double.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

// Activation indices (kernels::fused::UnaryFn).
constexpr std::int64_t kRelu = 5;
constexpr std::int64_t kHardswish = 10;

// Every bit equal (any NaN matches any NaN).
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  }
  return true;
}

// ---- conv2d -----------------------------------------------------------------

struct ConvCase {
  const char* what;
  Dims x, w;
  ref::Conv2dArgs a;
};

const ConvCase kConvCases[] = {
    {"3x3 padded", {2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
    {"groups 2, stride 2", {1, 4, 9, 9}, {6, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 2}},
    {"depthwise", {2, 5, 8, 7}, {5, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 5}},
    {"depthwise x2 multiplier, stride 2", {1, 4, 10, 9}, {8, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 4}},
    {"depthwise 5x5 stride 2 pad 2", {2, 4, 8, 9}, {4, 1, 5, 5}, {2, 2, 2, 2, 1, 1, 4}},
    {"depthwise dilated", {1, 3, 7, 7}, {3, 1, 3, 3}, {1, 1, 2, 2, 2, 2, 3}},
    {"depthwise unpadded stride 3", {1, 2, 9, 11}, {2, 1, 3, 2}, {3, 3, 0, 0, 1, 1, 2}},
    {"dilation 2", {2, 3, 9, 10}, {4, 3, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
    {"1x1", {2, 8, 5, 6}, {16, 8, 1, 1}, {1, 1, 0, 0, 1, 1, 1}},
    {"1x1 groups 2", {1, 8, 5, 6}, {4, 4, 1, 1}, {1, 1, 0, 0, 1, 1, 2}},
    {"1x1 stride 2", {1, 3, 6, 6}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1, 1}},
    {"1x1 padded", {1, 3, 4, 5}, {2, 3, 1, 1}, {1, 1, 1, 1, 1, 1, 1}},
    {"asymmetric kernel, stride and padding", {1, 2, 5, 5}, {3, 2, 5, 3}, {1, 2, 2, 0, 1, 1, 1}},
    {"stride larger than the kernel", {1, 3, 4, 4}, {2, 3, 2, 2}, {3, 3, 0, 0, 1, 1, 1}},
    {"one output channel", {2, 3, 5, 5}, {1, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
    {"one output pixel", {1, 2, 3, 3}, {4, 2, 3, 3}, {1, 1, 0, 0, 1, 1, 1}},
};

struct ConvData {
  std::vector<float> x, w, b;
};

ConvData conv_data(const ConvCase& c, std::mt19937& rng) {
  return {sgtest::random_floats(rng, ref::numel(c.x)), sgtest::random_floats(rng, ref::numel(c.w)),
          sgtest::random_floats(rng, c.w[0])};
}

Tensor run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ref::Conv2dArgs& a,
                std::int64_t act = -1) {
  return ops::conv2d(x, w, b, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw, a.groups, act);
}

TEST(ops_conv2d, matches_the_seven_loop_reference) {
  std::mt19937 rng(51);
  for (const auto& c : kConvCases) {
    SCOPED_TRACE(c.what);
    const ConvData d = conv_data(c, rng);
    const Tensor out = run_conv(make(d.x, c.x), make(d.w, c.w), make(d.b, {c.w[0]}), c.a);
    EXPECT_EQ(sgtest::dims_of(out), ref::conv2d_shape(c.x, c.w, c.a));
    EXPECT_TRUE(all_close(out.to_floats(), ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a), kConvRtol,
                          kConvAtol));
  }
}

TEST(ops_conv2d, activations_relu_and_hardswish_after_the_bias) {
  std::mt19937 rng(52);
  for (const auto& c : kConvCases) {
    SCOPED_TRACE(c.what);
    const ConvData d = conv_data(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    EXPECT_TRUE(all_close(run_conv(x, w, b, c.a, kRelu).to_floats(),
                          ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::relu), kConvRtol,
                          kConvAtol));
    EXPECT_TRUE(all_close(run_conv(x, w, b, c.a, kHardswish).to_floats(),
                          ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::hardswish), kConvRtol,
                          kConvAtol));
  }
}

// fuse_conv_activation relies on this: the epilogue is bitwise the operator.
TEST(ops_conv2d, every_activation_is_bitwise_the_unary_operator_on_the_plain_result) {
  std::mt19937 rng(53);
  const std::vector<std::pair<std::int64_t, Tensor (*)(const Tensor&)>> unaries = {
      {0, ops::neg},  {1, ops::exp},     {2, ops::sqrt},       {3, ops::rsqrt},
      {4, ops::erf},  {5, ops::relu},    {6, ops::silu},       {7, ops::gelu},
      {8, ops::tanh}, {9, ops::sigmoid}, {10, ops::hardswish}, {11, ops::hardsigmoid}};
  for (const std::size_t which : {0U, 2U, 8U}) {  // im2col, depthwise, 1x1
    const ConvCase& c = kConvCases[which];
    SCOPED_TRACE(c.what);
    const ConvData d = conv_data(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    const Tensor plain = run_conv(x, w, b, c.a);
    for (const auto& [act, fn] : unaries) {
      SCOPED_TRACE(act);
      EXPECT_TRUE(bitwise_equal(run_conv(x, w, b, c.a, act).to_floats(), fn(plain).to_floats()));
    }
  }
}

TEST(ops_conv2d, reads_strided_inputs) {
  std::mt19937 rng(54);
  for (const std::size_t which : {0U, 1U, 2U, 8U}) {
    const ConvCase& c = kConvCases[which];
    SCOPED_TRACE(c.what);
    const ConvData d = conv_data(c, rng);
    // x channels-last: [N, H, W, C] memory permuted to [N, C, H, W].
    const Dims nhwc = {c.x[0], c.x[2], c.x[3], c.x[1]};
    const Tensor x = make(ref::permute(d.x, c.x, {0, 2, 3, 1}), nhwc).permute({0, 3, 1, 2});
    ASSERT_FALSE(x.is_contiguous());
    // w transposed in memory: [KW, KH, C/g, O] permuted back.
    const Dims wt = {c.w[3], c.w[2], c.w[1], c.w[0]};
    const Tensor w = make(ref::permute(d.w, c.w, {3, 2, 1, 0}), wt).permute({3, 2, 1, 0});
    // b every other element of a longer vector.
    std::vector<float> b2;
    for (const float v : d.b) b2.insert(b2.end(), {v, 99.0F});
    const Tensor b = ops::slice(make(b2, {2 * c.w[0]}), 0, 0, 2 * c.w[0], 2);
    EXPECT_TRUE(all_close(run_conv(x, w, b, c.a, kRelu).to_floats(),
                          ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::relu), kConvRtol,
                          kConvAtol));
  }
}

TEST(ops_conv2d, writes_a_strided_placed_output) {
  std::mt19937 rng(55);
  const auto& conv = sinkgraph::OpRegistry::instance().get("conv2d");
  for (const std::size_t which : {0U, 2U, 8U}) {
    const ConvCase& c = kConvCases[which];
    SCOPED_TRACE(c.what);
    const ConvData d = conv_data(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    const Dims os = ref::conv2d_shape(c.x, c.w, c.a);
    // Channels-last output memory: [N, Ho, Wo, O] seen as [N, O, Ho, Wo].
    const Tensor out = Tensor::empty(sgtest::to_shape({os[0], os[2], os[3], os[1]}), DType::f32)
                           .permute({0, 3, 1, 2});
    const Tensor* tensors[] = {&x, &w, &b};
    const sinkgraph::ScalarValue scalars[] = {SymInt(c.a.sh),     SymInt(c.a.sw),    SymInt(c.a.ph),
                                              SymInt(c.a.pw),     SymInt(c.a.dh),    SymInt(c.a.dw),
                                              SymInt(c.a.groups), SymInt(kHardswish)};
    (void)sinkgraph::run_op(conv, tensors, scalars, &out);
    EXPECT_TRUE(all_close(out.to_floats(),
                          ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::hardswish), kConvRtol,
                          kConvAtol));
  }
}

TEST(ops_conv2d, empty_batch_gives_an_empty_output) {
  const Tensor out = ops::conv2d(Tensor::empty({0, 3, 5, 5}, DType::f32), ops::zeros({4, 3, 3, 3}),
                                 ops::zeros({4}), 1, 1, 1, 1);
  EXPECT_EQ(sgtest::dims_of(out), (Dims{0, 4, 5, 5}));
}

TEST(ops_conv2d, errors_name_the_argument_and_shapes) {
  const Tensor x = ops::zeros({1, 4, 5, 5});
  const Tensor w = ops::zeros({6, 2, 3, 3});
  const Tensor b = ops::zeros({6});
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b); }),
                           {"conv2d", "groups=1", "[6,2,3,3]", "2 channels", "[1,4,5,5]"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b, 1, 1, 0, 0, 1, 1, 4); }),
                           {"conv2d", "groups=4"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::conv2d(x, ops::zeros({6, 1, 3, 3}), b, 1, 1, 0, 0, 1, 1, 4);
                           }),
                           {"conv2d", "6 output channels", "not divisible by groups=4"}));
  EXPECT_TRUE(
      contains_all(error_of([&] { (void)ops::conv2d(x, w, ops::zeros({5}), 1, 1, 0, 0, 1, 1, 2); }),
                   {"conv2d", "b[5]", "O=6"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::conv2d(x, ops::zeros({6, 4, 7, 3}), b);
                           }),
                           {"conv2d", "dilated kernel spans 7", "padded input has only 5"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b, 0, 1, 0, 0, 1, 1, 2); }),
                           {"conv2d", "stride must be >= 1"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b, 1, 1, -1, 0, 1, 1, 2); }),
                           {"conv2d", "padding must be >= 0"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b, 1, 1, 0, 0, 1, 0, 2); }),
                           {"conv2d", "dilation must be >= 1"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::conv2d(x, w, b, 1, 1, 0, 0, 1, 1, 2, 14); }),
                           {"conv2d", "activation 14"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::conv2d(ops::zeros({4, 5, 5}), w, b);
                           }),
                           {"conv2d", "x[4,5,5]", "4-D"}));
  const Tensor h = ops::zeros({1, 4, 5, 5}, DType::f16);
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::conv2d(h, ops::zeros({6, 2, 3, 3}, DType::f16),
                                               ops::zeros({6}, DType::f16), 1, 1, 0, 0, 1, 1, 2);
                           }),
                           {"conv2d", "f16", "only f32"}));
}

// ---- batch_norm ---------------------------------------------------------------

struct BnParams {
  std::vector<float> mean, var, w, b;
  Tensor tm, tv, tw, tb;
};

BnParams bn_params(std::int64_t c, std::mt19937& rng) {
  BnParams p;
  p.mean = sgtest::random_floats(rng, c, -1.0F, 1.0F);
  p.var = sgtest::random_floats(rng, c, 0.1F, 2.0F);
  p.w = sgtest::random_floats(rng, c, -2.0F, 2.0F);
  p.b = sgtest::random_floats(rng, c, -1.0F, 1.0F);
  p.tm = make(p.mean, {c});
  p.tv = make(p.var, {c});
  p.tw = make(p.w, {c});
  p.tb = make(p.b, {c});
  return p;
}

// PyTorch's arithmetic, step by step in f32 (each step computed in double and
// rounded once, which is the correctly rounded f32 result). The products go
// through volatile floats: GCC narrows a rounded product of widened floats to
// an f32 product and would then contract it with the sum into one fused
// multiply-add (this file builds with -march=native).
std::vector<float> bn_torch_f32(const std::vector<float>& x, const Dims& xs, const BnParams& p,
                                double eps) {
  std::int64_t inner = 1;
  for (std::size_t i = 2; i < xs.size(); ++i) inner *= xs[i];
  std::vector<float> out(x.size());
  const auto f = [](double v) { return static_cast<float>(v); };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % xs[1]);
    const float shifted = f(double(p.var[c]) + double(f(eps)));
    const float invstd = f(1.0 / double(f(std::sqrt(double(shifted)))));
    const float alpha = f(double(invstd) * double(p.w[c]));
    const volatile float mean_alpha = f(double(p.mean[c]) * double(alpha));
    const float beta = f(double(p.b[c]) - double(mean_alpha));
    const volatile float x_alpha = f(double(x[i]) * double(alpha));
    out[i] = f(double(x_alpha) + double(beta));
  }
  return out;
}

TEST(ops_batch_norm, matches_the_reference_over_channel_dim_1) {
  std::mt19937 rng(61);
  for (const Dims& shape : {Dims{2, 3, 4, 5}, Dims{4, 3}, Dims{2, 3, 7}, Dims{1, 16, 1, 1}}) {
    SCOPED_TRACE(sgtest::str(shape));
    const auto x = sgtest::random_floats(rng, ref::numel(shape), -3.0F, 3.0F);
    const BnParams p = bn_params(shape[1], rng);
    const Tensor out = ops::batch_norm(make(x, shape), p.tm, p.tv, p.tw, p.tb, 1e-5);
    EXPECT_EQ(sgtest::dims_of(out), shape);
    const auto got = out.to_floats();
    EXPECT_TRUE(
        all_close(got, ref::batch_norm(x, shape, p.mean, p.var, p.w, p.b, 1e-5), kRtol, kAtol));
    // PyTorch's form: alpha = weight / sqrt(var + eps), beta = bias - mean * alpha, x * alpha +
    // beta.
    EXPECT_TRUE(bitwise_equal(got, bn_torch_f32(x, shape, p, 1e-5)));
  }
}

TEST(ops_batch_norm, reads_strided_inputs) {
  std::mt19937 rng(62);
  const Dims shape = {2, 3, 4, 5};
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -3.0F, 3.0F);
  const BnParams p = bn_params(3, rng);
  const Dims nhwc = {2, 4, 5, 3};
  const Tensor xs = make(ref::permute(x, shape, {0, 2, 3, 1}), nhwc).permute({0, 3, 1, 2});
  EXPECT_TRUE(bitwise_equal(ops::batch_norm(xs, p.tm, p.tv, p.tw, p.tb, 1e-3).to_floats(),
                            bn_torch_f32(x, shape, p, 1e-3)));
}

TEST(ops_batch_norm, half_precision_computes_in_f32) {
  std::mt19937 rng(63);
  const Dims shape = {2, 4, 3, 3};
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -3.0F, 3.0F);
  const BnParams p = bn_params(4, rng);
  for (const DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> xs, m, v, w, b;
    const Tensor out = ops::batch_norm(make(x, shape, dt, &xs), make(p.mean, {4}, dt, &m),
                                       make(p.var, {4}, dt, &v), make(p.w, {4}, dt, &w),
                                       make(p.b, {4}, dt, &b), 1e-5);
    EXPECT_EQ(out.dtype(), dt);
    // One rounding of the result, plus f32 arithmetic in between.
    const double rtol = dt == DType::f16 ? 2e-3 : 1e-2;
    EXPECT_TRUE(
        all_close(out.to_floats(), ref::batch_norm(xs, shape, m, v, w, b, 1e-5), rtol, 2e-3));
  }
}

TEST(ops_batch_norm, errors_name_the_argument_and_shapes) {
  const Tensor x = ops::zeros({2, 3, 4});
  const Tensor c = ops::zeros({3});
  EXPECT_TRUE(
      contains_all(error_of([&] { (void)ops::batch_norm(x, ops::zeros({4}), c, c, c, 1e-5); }),
                   {"batch_norm", "mean[4]", "C=3", "x[2,3,4]"}));
  EXPECT_TRUE(contains_all(
      error_of([&] { (void)ops::batch_norm(x, c, c, c, ops::zeros({3}, DType::f16), 1e-5); }),
      {"batch_norm", "bias"}));
  EXPECT_TRUE(
      contains_all(error_of([&] { (void)ops::batch_norm(ops::zeros({3}), c, c, c, c, 1e-5); }),
                   {"batch_norm", "at least 2 dimensions"}));
}

// ---- max_pool2d -----------------------------------------------------------------

struct PoolCase {
  const char* what;
  Dims x;
  ref::Pool2dArgs a;
};

const PoolCase kPoolCases[] = {
    {"3x3 stride 2 pad 1 (ResNet stem)", {2, 3, 9, 8}, {3, 3, 2, 2, 1, 1}},
    {"2x2 stride 2", {1, 2, 6, 7}, {2, 2, 2, 2}},
    {"2x2 stride 2 ceil", {1, 2, 6, 7}, {2, 2, 2, 2, 0, 0, 1, 1, true}},
    {"3x3 stride 2 ceil", {1, 2, 6, 6}, {3, 3, 2, 2, 0, 0, 1, 1, true}},
    {"ceil with padding drops the window starting in the right padding",
     {1, 1, 5, 5},
     {2, 2, 2, 2, 1, 1, 1, 1, true}},
    {"ceil keeps a last window that starts inside", {1, 1, 6, 6}, {3, 3, 2, 2, 1, 1, 1, 1, true}},
    {"dilation 2", {1, 2, 9, 9}, {3, 3, 1, 1, 1, 1, 2, 2}},
    {"dilation 2 ceil", {1, 2, 10, 9}, {2, 3, 3, 2, 1, 1, 2, 2, true}},
    {"3-D input", {3, 7, 7}, {3, 2, 2, 1, 1, 1}},
    {"1x1 input, ceil", {1, 1, 1, 1}, {2, 2, 2, 2, 0, 0, 1, 1, true}},
    // Rows wide enough for outputs whose window lies inside (Note [Pooling a
    // window in two passes]) beside edge outputs on both sides.
    {"wide rows, ResNet stem", {1, 3, 13, 41}, {3, 3, 2, 2, 1, 1}},
    {"wide rows, 2x5 stride 3, dilation 2, padding", {1, 2, 11, 50}, {2, 5, 1, 3, 1, 2, 1, 2}},
    {"wide rows, stride 1, ceil", {2, 1, 5, 37}, {3, 4, 1, 1, 1, 2, 1, 1, true}},
};

TEST(ops_max_pool2d, matches_the_reference_with_pytorch_output_sizes) {
  std::mt19937 rng(71);
  for (const auto& c : kPoolCases) {
    SCOPED_TRACE(c.what);
    const auto x = sgtest::random_floats(rng, ref::numel(c.x), -3.0F, 3.0F);
    const Tensor out = ops::max_pool2d(make(x, c.x), c.a.kh, c.a.kw, c.a.sh, c.a.sw, c.a.ph, c.a.pw,
                                       c.a.dh, c.a.dw, c.a.ceil_mode);
    EXPECT_EQ(sgtest::dims_of(out), ref::max_pool2d_shape(c.x, c.a));
    EXPECT_EQ(out.to_floats(), ref::max_pool2d(x, c.x, c.a));
  }
}

TEST(ops_max_pool2d, known_output_sizes) {
  // PyTorch: nn.MaxPool2d(2, 2, padding=1, ceil_mode=True) on 5x5 gives 3x3;
  // (3, 2, ceil_mode=True) on 6x6 gives 3x3 and on 5x5 2x2; floor on 6x6 2x2.
  EXPECT_EQ(ref::pool_size(5, 2, 2, 1, 1, true), 3);
  const auto size = [](std::int64_t h, std::int64_t k, std::int64_t s, std::int64_t p, bool ceil) {
    return ops::max_pool2d(ops::zeros({1, 1, h, h}), k, k, s, s, p, p, 1, 1, ceil).size(2);
  };
  EXPECT_EQ(size(5, 2, 2, 1, true), 3);
  EXPECT_EQ(size(6, 3, 2, 0, true), 3);
  EXPECT_EQ(size(5, 3, 2, 0, true), 2);
  EXPECT_EQ(size(6, 3, 2, 0, false), 2);
  EXPECT_EQ(size(112, 3, 2, 1, false), 56);
}

TEST(ops_max_pool2d, padding_is_minus_infinity_and_nan_wins) {
  // All negative: a zero padding would win; PyTorch's never does.
  const std::vector<float> neg = {-5, -4, -3, -2};
  EXPECT_EQ(ops::max_pool2d(make(neg, {1, 1, 2, 2}), 3, 3, 1, 1, 1, 1).to_floats(),
            (std::vector<float>{-2, -2, -2, -2}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {1, nan, 3, 4, 5, 6, 7, 8, 9};
  const auto out = ops::max_pool2d(make(v, {1, 1, 3, 3}), 2, 2, 1, 1).to_floats();
  ASSERT_EQ(out.size(), 4U);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 8.0F);
  EXPECT_EQ(out[3], 9.0F);
  // Where +0 and -0 tie, the first in row-major order is kept, as torch's
  // loop keeps it (torch.nn.functional.max_pool2d gives -0.0 for each of
  // these windows: -0 in the top row's right column, +0 in the bottom row's
  // left; Note [Pooling a window in two passes]).
  std::vector<float> ties(2 * 20, -1.0F);
  for (std::size_t j = 0; j < 10; ++j) {
    ties[2 * j + 1] = -0.0F;
    ties[20 + 2 * j] = 0.0F;
  }
  const auto tied = ops::max_pool2d(make(ties, {1, 1, 2, 20}), 2, 2, 2, 2).to_floats();
  ASSERT_EQ(tied.size(), 10U);
  for (const float t : tied) {
    EXPECT_EQ(t, 0.0F);
    EXPECT_TRUE(std::signbit(t));
  }
  // A wide row: a NaN inside, one at the left edge; 3x3, stride 1, padding 1.
  std::vector<float> wide(3 * 20);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<float>(i % 7);
  wide[20 + 10] = nan;
  wide[40] = nan;
  const auto got = ops::max_pool2d(make(wide, {1, 1, 3, 20}), 3, 3, 1, 1, 1, 1).to_floats();
  ASSERT_EQ(got.size(), wide.size());
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t c = 0; c < 20; ++c) {
      const bool want_nan = (c >= 9 && c <= 11) || (r >= 1 && c <= 1);
      EXPECT_EQ(std::isnan(got[static_cast<std::size_t>(r * 20 + c)]), want_nan) << r << ", " << c;
    }
  }
}

TEST(ops_max_pool2d, strided_input_and_half_precision) {
  std::mt19937 rng(72);
  const Dims shape = {2, 3, 8, 8};
  const ref::Pool2dArgs a{3, 3, 2, 2, 1, 1};
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -3.0F, 3.0F);
  const Tensor xs = make(ref::permute(x, shape, {0, 2, 3, 1}), {2, 8, 8, 3}).permute({0, 3, 1, 2});
  EXPECT_EQ(ops::max_pool2d(xs, 3, 3, 2, 2, 1, 1).to_floats(), ref::max_pool2d(x, shape, a));
  for (const DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> stored;
    const Tensor h = make(x, shape, dt, &stored);
    const Tensor out = ops::max_pool2d(h, 3, 3, 2, 2, 1, 1);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(out.to_floats(), ref::max_pool2d(stored, shape, a));  // a max is exact
  }
}

TEST(ops_max_pool2d, errors_match_pytorch_checks) {
  const Tensor x = ops::zeros({1, 2, 5, 5});
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::max_pool2d(x, 3, 3, 1, 1, 2, 1); }),
                           {"max_pool2d", "padding must be at most half the kernel size"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::max_pool2d(ops::zeros({1, 1, 1, 1}), 2, 2, 2, 2);
                           }),
                           {"max_pool2d", "empty"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::max_pool2d(x, 0, 2, 1, 1); }),
                           {"max_pool2d", "kernel size"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::max_pool2d(x, 2, 2, 0, 1); }),
                           {"max_pool2d", "stride"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::max_pool2d(x, 2, 2, 1, 1, 0, 0, 0, 1); }),
                           {"max_pool2d", "dilation"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::max_pool2d(ops::zeros({5, 5}), 2, 2, 1, 1);
                           }),
                           {"max_pool2d", "x[5,5]", "3-D"}));
}

// ---- mean -------------------------------------------------------------------------

TEST(ops_mean, over_dims_with_and_without_keepdim) {
  std::mt19937 rng(81);
  const Dims shape = {2, 3, 4, 5};
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 2.0F);
  const Tensor t = make(x, shape);
  struct Case {
    std::vector<std::int64_t> dims;
    std::vector<bool> reduced;
  };
  const Case cases[] = {
      {{2, 3}, {false, false, true, true}}, {{-1, -2}, {false, false, true, true}},
      {{1}, {false, true, false, false}},   {{0, 2}, {true, false, true, false}},
      {{}, {true, true, true, true}},       {{3, 0, 1}, {true, true, false, true}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(sgtest::str(Dims(c.dims.begin(), c.dims.end())));
    const auto want = ref::mean(x, shape, c.reduced);
    for (const bool keepdim : {false, true}) {
      const Tensor out = ops::mean(t, c.dims, keepdim);
      Dims expected;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        if (!c.reduced[d]) {
          expected.push_back(shape[d]);
        } else if (keepdim) {
          expected.push_back(1);
        }
      }
      EXPECT_EQ(sgtest::dims_of(out), expected);
      EXPECT_TRUE(all_close(out.to_floats(), want, kRtol, kAtol));
    }
  }
}

// Long rows of adjacent values take kLanes sums side by side
// (src/kernels/cpu/reduce.cpp); a global pooling's rows of 99 with a tail,
// one holding a NaN, f32 and bf16.
TEST(ops_mean, long_rows_of_a_global_pooling) {
  std::mt19937 rng(83);
  const Dims shape = {3, 7, 9, 11};
  auto x = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 2.0F);
  x[static_cast<std::size_t>((1 * 7 + 4) * 99 + 50)] = std::numeric_limits<float>::quiet_NaN();
  const auto want = ref::mean(x, shape, {false, false, true, true});
  const auto got = ops::mean(make(x, shape), {2, 3}, false).to_floats();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i == 1 * 7 + 4) {
      EXPECT_TRUE(std::isnan(got[i]));
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-6) << i;
    }
  }
  std::vector<float> stored;
  const Tensor h = make(x, shape, DType::bf16, &stored);
  const auto hw = ref::mean(stored, shape, {false, false, true, true});
  const auto hg = ops::mean(h, {-1, -2}, true).to_floats();
  for (std::size_t i = 0; i < hg.size(); ++i) {
    if (!std::isnan(hw[i])) {
      EXPECT_NEAR(hg[i], hw[i], 8e-3) << i;
    }
  }
}

TEST(ops_mean, strided_input_half_precision_and_empty_reductions) {
  std::mt19937 rng(82);
  const Dims shape = {2, 3, 4, 5};
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 2.0F);
  const Tensor xs = make(ref::permute(x, shape, {0, 2, 3, 1}), {2, 4, 5, 3}).permute({0, 3, 1, 2});
  EXPECT_TRUE(all_close(ops::mean(xs, {2, 3}, true).to_floats(),
                        ref::mean(x, shape, {false, false, true, true}), kRtol, kAtol));
  EXPECT_TRUE(all_close(ops::mean(xs, {1}, false).to_floats(),
                        ref::mean(x, shape, {false, true, false, false}), kRtol, kAtol));
  std::vector<float> stored;
  const Tensor h = make(x, shape, DType::bf16, &stored);
  const Tensor hm = ops::mean(h, {-1}, false);
  EXPECT_EQ(hm.dtype(), DType::bf16);
  EXPECT_TRUE(
      all_close(hm.to_floats(), ref::mean(stored, shape, {false, false, false, true}), 8e-3, 1e-3));
  // The mean of nothing is 0/0.
  const auto empty = ops::mean(Tensor::empty({3, 0}, DType::f32), {1}, false).to_floats();
  ASSERT_EQ(empty.size(), 3U);
  for (const float v : empty) EXPECT_TRUE(std::isnan(v));
  // A 0-dimensional tensor is its own mean.
  EXPECT_EQ(ops::mean(make({2.5F}, {}), {0}, false).to_floats(), (std::vector<float>{2.5F}));
}

TEST(ops_mean, errors) {
  const Tensor x = ops::zeros({2, 3});
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::mean(x, {1, -1}, false);
                           }),
                           {"mean", "dim 1 appears multiple times"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::mean(x, {2}, false); }), {"mean"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::mean(Tensor::from_ints({1, 2}, {2}), {0}, false);
                           }),
                           {"mean", "i64", "floating"}));
}

// ---- expand ------------------------------------------------------------------------

TEST(ops_expand, is_a_view_with_zero_strides) {
  const std::vector<float> v = {1, 2, 3};
  const Tensor x = make(v, {3, 1});
  const Tensor e = ops::expand(x, sgtest::to_sym({2, 3, 4}));
  EXPECT_TRUE(e.shares_storage(x));
  EXPECT_EQ(sgtest::dims_of(e), (Dims{2, 3, 4}));
  EXPECT_EQ(e.strides(), (sinkgraph::Strides{0, 1, 0}));
  EXPECT_EQ(e.to_floats(), ref::expand(v, {3, 1}, {2, 3, 4}));
  // -1 keeps a size; equal sizes keep the stride.
  const Tensor k = ops::expand(x, sgtest::to_sym({-1, 5}));
  EXPECT_EQ(sgtest::dims_of(k), (Dims{3, 5}));
  EXPECT_EQ(k.strides(), (sinkgraph::Strides{1, 0}));
  EXPECT_EQ(ops::expand(x, sgtest::to_sym({3, 1})).strides(), x.strides());
  // Size 1 may expand to 0.
  EXPECT_EQ(sgtest::dims_of(ops::expand(x, sgtest::to_sym({3, 0}))), (Dims{3, 0}));
}

TEST(ops_expand, kernels_read_stride_zero_inputs) {
  std::mt19937 rng(91);
  const auto a = sgtest::random_floats(rng, 4);
  const Dims as = {4, 1}, shape = {2, 4, 3};
  const Tensor e = ops::expand(make(a, as), sgtest::to_sym(shape));
  const auto want = ref::expand(a, as, shape);
  // contiguous and copy_.
  EXPECT_EQ(ops::contiguous(e).to_floats(), want);
  const Tensor dst = ops::zeros(sgtest::to_sym(shape));
  EXPECT_EQ(ops::copy_(dst, e).to_floats(), want);
  // Unary and binary elementwise kernels.
  EXPECT_EQ(ops::neg(e).to_floats(), ref::unary(want, [](double v) { return -v; }));
  const auto b = sgtest::random_floats(rng, ref::numel(shape));
  EXPECT_EQ(ops::add(e, make(b, shape)).to_floats(),
            ref::binary(want, shape, b, shape, [](float p, float q) { return p + q; }));
  EXPECT_EQ(ops::mul(make(b, shape), e).to_floats(),
            ref::binary(b, shape, want, shape, [](float p, float q) { return p * q; }));
  // reshape copies (view refuses a stride-0 layout).
  EXPECT_EQ(ops::reshape(e, sgtest::to_sym({8, 3})).to_floats(), want);
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::view(e, sgtest::to_sym({24})); }),
                           {"view", "not contiguous"}));
}

TEST(ops_expand, errors_match_pytorch) {
  const Tensor x = ops::zeros({3, 1});
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::expand(x, sgtest::to_sym({4, 2}));
                           }),
                           {"expand", "expanded size 4", "existing size 3", "dimension 0"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::expand(x, sgtest::to_sym({-1, 3, 2}));
                           }),
                           {"expand", "new leading dimension 0"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)ops::expand(x, sgtest::to_sym({2})); }),
                           {"expand", "number of sizes"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)ops::expand(x, sgtest::to_sym({3, -2}));
                           }),
                           {"expand", "negative"}));
}

// ---- intra-op threads ----------------------------------------------------------------

TEST(ops_vision_threads, results_do_not_depend_on_the_intra_op_thread_count) {
  std::mt19937 rng(101);
  const Dims shape = {8, 64, 16, 16};  // enough rows, planes and outputs to split
  const auto x = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 2.0F);
  const Tensor t = make(x, shape);
  const BnParams p = bn_params(64, rng);
  const Tensor w = make(sgtest::random_floats(rng, 64 * 9), {64, 1, 3, 3});
  const Tensor b = make(sgtest::random_floats(rng, 64), {64});
  const auto run_all = [&] {
    return std::vector<std::vector<float>>{
        ops::batch_norm(t, p.tm, p.tv, p.tw, p.tb, 1e-5).to_floats(),
        ops::max_pool2d(t, 2, 2, 2, 2).to_floats(), ops::mean(t, {2, 3}, true).to_floats(),
        ops::conv2d(t, w, b, 1, 1, 1, 1, 1, 1, 64, kRelu).to_floats()};
  };
  const int saved = sinkgraph::num_threads();
  sinkgraph::set_num_threads(1);
  const auto one = run_all();
  sinkgraph::set_num_threads(4);
  const auto four = run_all();
  sinkgraph::set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], four[i])) << i;
}

}  // namespace
