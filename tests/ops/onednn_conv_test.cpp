// conv2d through oneDNN (Note [Convolutions through oneDNN] in
// src/kernels/cpu/onednn.h) against the naive seven-loop reference, on
// shapes large enough to take that path: odd sizes, strides, padding,
// dilation, groups, depthwise with a channel multiplier, a remainder block,
// strided and channels-last tensors, every activation. Each case also runs
// with set_use_onednn(false) (our own kernels) against the same reference,
// and onednn_conv_calls() says which path ran. In a build without oneDNN
// (SINKGRAPH_ONEDNN=OFF, the tsan preset) the oneDNN half is skipped.
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/tensor.h"
#include "thread_count.h"

namespace {

using sinkgraph::DType;
using sinkgraph::SymInt;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::all_close;
using sgtest::Dims;
using sgtest::make;

// Sums of up to 300 f32 products of values in [-1, 1], blocked in oneDNN's
// order, against a double reference.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 5e-5;
constexpr std::int64_t kRelu = 5;
constexpr std::int64_t kHardswish = 10;

struct Case {
  const char* what;
  Dims x, w;
  ref::Conv2dArgs a;
};

// Every case is above onednn::kMinMacs, has a kernel larger than 1x1 and at
// least 32 output positions: the shapes oneDNN runs.
const Case kCases[] = {
    {"3x3 padded, odd channels and sizes, batch 2",
     {2, 5, 17, 13},
     {24, 5, 3, 3},
     {1, 1, 1, 1, 1, 1, 1}},
    {"5x3 kernel, stride 2x1, padding 2x0, a remainder block",
     {1, 8, 23, 19},
     {40, 8, 5, 3},
     {2, 1, 2, 0, 1, 1, 1}},
    {"dilation 2", {1, 6, 20, 20}, {33, 6, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
    {"groups 4, 12 outputs per group", {1, 16, 15, 15}, {48, 4, 3, 3}, {1, 1, 1, 1, 1, 1, 4}},
    {"depthwise 3x3 stride 2, batch 2", {2, 64, 30, 30}, {64, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 64}},
    {"depthwise 5x5, channel multiplier 2", {1, 24, 20, 20}, {48, 1, 5, 5}, {1, 1, 2, 2, 1, 1, 24}},
    {"7x7 stride 2 stem, batch 3", {3, 3, 40, 40}, {16, 3, 7, 7}, {2, 2, 3, 3, 1, 1, 1}},
    {"300 output channels: eight blocks", {1, 32, 8, 8}, {300, 32, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
};

struct Data {
  std::vector<float> x, w, b;
};

Data data_for(const Case& c, std::mt19937& rng) {
  return {sgtest::random_floats(rng, ref::numel(c.x)), sgtest::random_floats(rng, ref::numel(c.w)),
          sgtest::random_floats(rng, c.w[0])};
}

Tensor conv(const Tensor& x, const Tensor& w, const Tensor& b, const ref::Conv2dArgs& a,
            std::int64_t act = -1) {
  return ops::conv2d(x, w, b, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw, a.groups, act);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  }
  return true;
}

// Restores the switch whatever a test set it to.
class OneDnnSwitch {
 public:
  OneDnnSwitch() : saved_(ops::use_onednn()) {}
  ~OneDnnSwitch() { ops::set_use_onednn(saved_); }
  OneDnnSwitch(const OneDnnSwitch&) = delete;
  OneDnnSwitch& operator=(const OneDnnSwitch&) = delete;

 private:
  bool saved_;
};

// Runs fn with oneDNN on (when built) and off; checks which path ran.
template <typename Fn>
void on_both_paths(Fn&& fn) {
  const OneDnnSwitch restore;
  for (const bool use : {true, false}) {
    if (use && !ops::onednn_built()) continue;
    SCOPED_TRACE(use ? "oneDNN" : "own kernels");
    ops::set_use_onednn(use);
    const std::uint64_t before = ops::onednn_conv_calls();
    const int convs = fn();
    EXPECT_EQ(ops::onednn_conv_calls() - before, use ? static_cast<std::uint64_t>(convs) : 0U);
  }
}

TEST(onednn_conv2d, matches_the_seven_loop_reference_on_both_paths) {
  std::mt19937 rng(61);
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.what);
    const Data d = data_for(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    const auto want = ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a);
    const auto want_relu = ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::relu);
    on_both_paths([&] {
      const Tensor out = conv(x, w, b, c.a);
      EXPECT_EQ(sgtest::dims_of(out), ref::conv2d_shape(c.x, c.w, c.a));
      EXPECT_TRUE(all_close(out.to_floats(), want, kRtol, kAtol));
      EXPECT_TRUE(all_close(conv(x, w, b, c.a, kRelu).to_floats(), want_relu, kRtol, kAtol));
      return 2;
    });
  }
}

// fuse_conv_activation relies on this on every path.
TEST(onednn_conv2d, every_activation_is_bitwise_the_unary_operator_on_the_plain_result) {
  std::mt19937 rng(62);
  const std::vector<std::pair<std::int64_t, Tensor (*)(const Tensor&)>> unaries = {
      {0, ops::neg},  {1, ops::exp},     {2, ops::sqrt},       {3, ops::rsqrt},
      {4, ops::erf},  {5, ops::relu},    {6, ops::silu},       {7, ops::gelu},
      {8, ops::tanh}, {9, ops::sigmoid}, {10, ops::hardswish}, {11, ops::hardsigmoid}};
  for (const std::size_t which : {0U, 3U, 4U}) {  // dense, grouped, depthwise
    const Case& c = kCases[which];
    SCOPED_TRACE(c.what);
    const Data d = data_for(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    on_both_paths([&] {
      const Tensor plain = conv(x, w, b, c.a);
      for (const auto& [act, fn] : unaries) {
        SCOPED_TRACE(act);
        EXPECT_TRUE(bitwise_equal(conv(x, w, b, c.a, act).to_floats(), fn(plain).to_floats()));
      }
      return 1 + static_cast<int>(unaries.size());
    });
  }
}

// Channels-last input (read in place), a transposed weight, a strided bias,
// an input sliced along W (reordered), a channels-last output (written in
// place) and an output placed in a larger buffer.
TEST(onednn_conv2d, strided_and_channels_last_tensors) {
  std::mt19937 rng(63);
  const auto& conv_op = sinkgraph::OpRegistry::instance().get("conv2d");
  for (const std::size_t which : {0U, 3U, 4U, 6U}) {
    const Case& c = kCases[which];
    SCOPED_TRACE(c.what);
    const Data d = data_for(c, rng);
    const Dims nhwc = {c.x[0], c.x[2], c.x[3], c.x[1]};
    const Tensor x_cl = make(ref::permute(d.x, c.x, {0, 2, 3, 1}), nhwc).permute({0, 3, 1, 2});
    ASSERT_FALSE(x_cl.is_contiguous());
    // x as every other column of a twice-as-wide image.
    std::vector<float> wide;
    for (std::size_t i = 0; i < d.x.size(); ++i) wide.insert(wide.end(), {d.x[i], 7.0F});
    const Dims wide_shape = {c.x[0], c.x[1], c.x[2], 2 * c.x[3]};
    const Tensor x_sliced = ops::slice(make(wide, wide_shape), 3, 0, 2 * c.x[3], 2);
    const Dims wt = {c.w[3], c.w[2], c.w[1], c.w[0]};
    const Tensor w = make(ref::permute(d.w, c.w, {3, 2, 1, 0}), wt).permute({3, 2, 1, 0});
    std::vector<float> b2;
    for (const float v : d.b) b2.insert(b2.end(), {v, 99.0F});
    const Tensor b = ops::slice(make(b2, {2 * c.w[0]}), 0, 0, 2 * c.w[0], 2);
    const auto want = ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a, ref::hardswish);
    const Dims os = ref::conv2d_shape(c.x, c.w, c.a);

    on_both_paths([&] {
      EXPECT_TRUE(all_close(conv(x_cl, w, b, c.a, kHardswish).to_floats(), want, kRtol, kAtol));
      EXPECT_TRUE(all_close(conv(x_sliced, w, b, c.a, kHardswish).to_floats(), want, kRtol, kAtol));
      const Tensor out_cl =
          Tensor::empty(sgtest::to_shape({os[0], os[2], os[3], os[1]}), DType::f32)
              .permute({0, 3, 1, 2});
      // Channels 3.. of a buffer with 5 more channels than the output.
      const Tensor big =
          ops::zeros(sinkgraph::to_sym(sgtest::to_shape({os[0], os[1] + 5, os[2], os[3]})));
      const Tensor out_placed = ops::slice(big, 1, 3, 3 + os[1], 1);
      for (const Tensor* out : {&out_cl, &out_placed}) {
        const Tensor* tensors[] = {&x_cl, &w, &b};
        const sinkgraph::ScalarValue scalars[] = {
            SymInt(c.a.sh), SymInt(c.a.sw), SymInt(c.a.ph),     SymInt(c.a.pw),
            SymInt(c.a.dh), SymInt(c.a.dw), SymInt(c.a.groups), SymInt(kHardswish)};
        (void)sinkgraph::run_op(conv_op, tensors, scalars, out);
        EXPECT_TRUE(all_close(out->to_floats(), want, kRtol, kAtol));
      }
      // The placed output wrote nothing outside its channels.
      for (const std::int64_t ch : {0, 1, 2}) {
        for (const float v : ops::slice(big, 1, ch, ch + 1, 1).to_floats()) EXPECT_EQ(v, 0.0F);
      }
      return 4;
    });
  }
}

// The cut into blocks depends on the shape only: one thread and two give the
// same bits.
TEST(onednn_conv2d, result_does_not_depend_on_the_thread_count) {
  const sgtest::ThreadCount restore;
  std::mt19937 rng(64);
  for (const std::size_t which : {1U, 3U, 4U, 7U}) {
    const Case& c = kCases[which];
    SCOPED_TRACE(c.what);
    const Data d = data_for(c, rng);
    const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
    on_both_paths([&] {
      sinkgraph::set_num_threads(1);
      const auto one = conv(x, w, b, c.a, kRelu).to_floats();
      sinkgraph::set_num_threads(2);
      EXPECT_TRUE(bitwise_equal(conv(x, w, b, c.a, kRelu).to_floats(), one));
      return 2;
    });
  }
}

// No reordered weight is kept between calls: a weight written in place is
// read again by the next call.
TEST(onednn_conv2d, a_weight_written_in_place_is_seen_by_the_next_call) {
  std::mt19937 rng(65);
  const Case& c = kCases[0];
  const Data d = data_for(c, rng);
  const Data e = data_for(c, rng);
  const Tensor x = make(d.x, c.x), w = make(d.w, c.w), b = make(d.b, {c.w[0]});
  on_both_paths([&] {
    ops::copy_(w, make(d.w, c.w));
    EXPECT_TRUE(all_close(conv(x, w, b, c.a).to_floats(), ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a),
                          kRtol, kAtol));
    ops::copy_(w, make(e.w, c.w));
    EXPECT_TRUE(all_close(conv(x, w, b, c.a).to_floats(), ref::conv2d(d.x, c.x, e.w, c.w, d.b, c.a),
                          kRtol, kAtol));
    return 2;
  });
}

// Below the size where oneDNN wins, and for 1x1 kernels, our own kernels run
// even with the switch on (the measured choice, bench_conv).
TEST(onednn_conv2d, small_problems_and_1x1_kernels_stay_on_our_kernels) {
  std::mt19937 rng(66);
  const OneDnnSwitch restore;
  ops::set_use_onednn(true);
  const Case small = {"3x3 8->8 at 8x8", {1, 8, 8, 8}, {8, 8, 3, 3}, {1, 1, 1, 1, 1, 1, 1}};
  const Case pointwise = {"1x1 64->128 at 28x28", {1, 64, 28, 28}, {128, 64, 1, 1}, {}};
  for (const Case& c : {small, pointwise}) {
    SCOPED_TRACE(c.what);
    const Data d = data_for(c, rng);
    const std::uint64_t before = ops::onednn_conv_calls();
    const Tensor out = conv(make(d.x, c.x), make(d.w, c.w), make(d.b, {c.w[0]}), c.a);
    EXPECT_TRUE(
        all_close(out.to_floats(), ref::conv2d(d.x, c.x, d.w, c.w, d.b, c.a), kRtol, kAtol));
    EXPECT_EQ(ops::onednn_conv_calls(), before);
  }
}

}  // namespace
