// softmax, rms_norm, layer_norm, rope, embedding, attention and argmax
// against the naive references.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "kernels/counter_rng.h"  // internal: the tests build with src/ on the include path
#include "ops/reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
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
// softmax and the norms accumulate in f32 against a double reference.
constexpr double kRowRtol = 1e-5;
constexpr double kRowAtol = 1e-6;
// rope: the kernel forms the angle (pos * theta^(-2i/D)) in f32; at positions
// below ~50 that costs up to ~1e-5 absolute in sin/cos.
constexpr double kRopeAtol = 5e-5;
// attention: f32 dot products and softmax against double.
constexpr double kAttnRtol = 1e-5;
constexpr double kAttnAtol = 2e-6;
// f16/bf16 outputs: one output rounding (2^-11 / 2^-8 relative), references on
// the rounded inputs; bf16 also rounds intermediate-free, so its budget is 8e-3.
constexpr double kF16Rtol = 1e-3;
constexpr double kBF16Rtol = 8e-3;
constexpr double kHalfAtol = 1e-3;

double half_rtol(DType d) { return d == DType::f16 ? kF16Rtol : kBF16Rtol; }

// Lengths below, at and past the eight-lane blocks of the f32 fast paths.
const Dims kRowShapes[] = {{4, 7}, {2, 3, 16}, {1, 1},        {5, 1},
                           {0, 8}, {9},        {3, 2, 2, 33}, {2, 288}};

// ---- softmax ----------------------------------------------------------------

TEST(ops_softmax, random_shapes) {
  std::mt19937 rng(41);
  for (const auto& shape : kRowShapes) {
    SCOPED_TRACE(sgtest::str(shape));
    const auto v = sgtest::random_floats(rng, ref::numel(shape), -4.0F, 4.0F);
    const Tensor out = ops::softmax(make(v, shape));
    EXPECT_EQ(sgtest::dims_of(out), shape);
    EXPECT_TRUE(all_close(out.to_floats(), ref::softmax(v, shape.back()), kRowRtol, kRowAtol));
  }
}

TEST(ops_softmax, large_values_are_stable) {
  // exp(1000) overflows f32: the kernel must subtract the row maximum.
  const std::vector<float> v = {1000.0F, 1001.0F, 999.0F, -1000.0F, -1001.0F, -1002.0F};
  const auto out = ops::softmax(make(v, {2, 3})).to_floats();
  EXPECT_TRUE(all_close(out, ref::softmax(v, 3), kRowRtol, kRowAtol));
  for (const float f : out) EXPECT_TRUE(std::isfinite(f));
}

TEST(ops_softmax, over_a_strided_last_dim) {
  std::mt19937 rng(42);
  const auto base = sgtest::random_floats(rng, 6 * 5, -3.0F, 3.0F);
  // transpose [6,5] -> [5,6]: the softmax dim has stride 5.
  const Tensor x = ops::transpose(make(base, {6, 5}), 0, 1);
  const auto v = ref::permute(base, {6, 5}, {1, 0});
  EXPECT_TRUE(all_close(ops::softmax(x).to_floats(), ref::softmax(v, 6), kRowRtol, kRowAtol));
  // And a slice that starts at an offset.
  const Tensor s = ops::slice(x, 0, 2, 5);
  EXPECT_TRUE(all_close(ops::softmax(s).to_floats(),
                        ref::softmax(ref::slice(v, {5, 6}, 0, 2, 5, 1), 6), kRowRtol, kRowAtol));
}

// ---- rms_norm / layer_norm ---------------------------------------------------

TEST(ops_norm, rms_norm_random_shapes) {
  std::mt19937 rng(43);
  for (const double eps : {1e-5, 1e-6}) {
    for (const auto& shape : kRowShapes) {
      SCOPED_TRACE(sgtest::str(shape));
      const auto v = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 2.0F);
      const auto w = sgtest::random_floats(rng, shape.back(), 0.5F, 1.5F);
      const Tensor out = ops::rms_norm(make(v, shape), make(w, {shape.back()}), eps);
      EXPECT_EQ(sgtest::dims_of(out), shape);
      EXPECT_TRUE(all_close(out.to_floats(), ref::rms_norm(v, w, eps), kRowRtol, kRowAtol));
    }
  }
}

TEST(ops_norm, layer_norm_random_shapes) {
  std::mt19937 rng(44);
  for (const auto& shape : kRowShapes) {
    SCOPED_TRACE(sgtest::str(shape));
    const auto v = sgtest::random_floats(rng, ref::numel(shape), -2.0F, 3.0F);
    const auto w = sgtest::random_floats(rng, shape.back(), 0.5F, 1.5F);
    const auto b = sgtest::random_floats(rng, shape.back());
    const Tensor out =
        ops::layer_norm(make(v, shape), make(w, {shape.back()}), make(b, {shape.back()}), 1e-5);
    EXPECT_EQ(sgtest::dims_of(out), shape);
    EXPECT_TRUE(all_close(out.to_floats(), ref::layer_norm(v, w, b, 1e-5), kRowRtol, kRowAtol));
  }
}

// The lane sums of a contiguous f32 row take the variance over x - mean (two
// passes): rows far from zero, where a one-pass E[x^2] - E[x]^2 in f32 loses
// every digit, keep it; widths on and off the lane count.
TEST(ops_norm, layer_norm_rows_far_from_zero_keep_their_variance) {
  std::mt19937 rng(46);
  for (const std::int64_t n : {8, 64, 100, 256, 1000}) {
    SCOPED_TRACE(n);
    auto v = sgtest::random_floats(rng, 3 * n, -1.0F, 1.0F);
    for (float& x : v) x += 1000.0F;
    const auto w = sgtest::random_floats(rng, n, 0.5F, 1.5F);
    const auto b = sgtest::random_floats(rng, n);
    const Tensor out = ops::layer_norm(make(v, {3, n}), make(w, {n}), make(b, {n}), 1e-5);
    // The inputs' own rounding at 1000 (2^-14) is 1e-4 of their spread.
    EXPECT_TRUE(all_close(out.to_floats(), ref::layer_norm(v, w, b, 1e-5), 1e-3, 1e-3));
  }
}

TEST(ops_norm, non_contiguous_inputs_and_weights) {
  std::mt19937 rng(45);
  const auto base = sgtest::random_floats(rng, 8 * 3, -2.0F, 2.0F);
  const Tensor x = ops::transpose(make(base, {8, 3}), 0, 1);  // [3, 8], last dim stride 3
  const auto v = ref::permute(base, {8, 3}, {1, 0});
  // weight and bias: every other element of a length-16 tensor.
  const auto wbase = sgtest::random_floats(rng, 16, 0.5F, 1.5F);
  const auto bbase = sgtest::random_floats(rng, 16);
  const Tensor w = ops::slice(make(wbase, {16}), 0, 1, 16, 2);
  const Tensor b = ops::slice(make(bbase, {16}), 0, 0, 16, 2);
  const auto vw = ref::slice(wbase, {16}, 0, 1, 16, 2);
  const auto vb = ref::slice(bbase, {16}, 0, 0, 16, 2);
  EXPECT_TRUE(all_close(ops::rms_norm(x, w, 1e-5).to_floats(), ref::rms_norm(v, vw, 1e-5), kRowRtol,
                        kRowAtol));
  EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5).to_floats(),
                        ref::layer_norm(v, vw, vb, 1e-5), kRowRtol, kRowAtol));
}

// Note [A layer norm over channels] (rows.cpp): ConvNeXt normalizes an NCHW
// activation over its channels through permute(0, 2, 3, 1), rows strided by
// H * W. Each row must equal the same row normalized dense, bitwise, on any
// number of threads, and the reference.
TEST(ops_norm, layer_norm_over_the_channels_of_a_channels_first_tensor) {
  std::mt19937 rng(47);
  for (const Dims& nchw : {Dims{1, 96, 7, 9}, Dims{2, 20, 5, 3}, Dims{1, 3, 1, 1}}) {
    SCOPED_TRACE(sgtest::str(nchw));
    const std::int64_t c = nchw[1];
    const auto base = sgtest::random_floats(rng, ref::numel(nchw), -2.0F, 3.0F);
    const auto w = sgtest::random_floats(rng, c, 0.5F, 1.5F);
    const auto b = sgtest::random_floats(rng, c);
    const Tensor x = ops::permute(make(base, nchw), {0, 2, 3, 1});  // [N, H, W, C] view
    const Tensor dense = ops::contiguous(x);
    const Tensor want = ops::layer_norm(dense, make(w, {c}), make(b, {c}), 1e-6);
    const sgtest::ThreadCount restore;
    for (const int threads : {1, 2}) {
      sinkgraph::set_num_threads(threads);
      const Tensor got = ops::layer_norm(x, make(w, {c}), make(b, {c}), 1e-6);
      EXPECT_EQ(sgtest::dims_of(got), sgtest::dims_of(want));
      EXPECT_EQ(got.to_floats(), want.to_floats());
    }
    const auto v = ref::permute(base, nchw, {0, 2, 3, 1});
    EXPECT_TRUE(all_close(want.to_floats(), ref::layer_norm(v, w, b, 1e-6), kRowRtol, kRowAtol));
  }
}

TEST(ops_norm, half_dtypes) {
  std::mt19937 rng(46);
  for (const DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(sinkgraph::dtype_name(dt)));
    std::vector<float> sx, sw, sb;
    const Tensor x = make(sgtest::random_floats(rng, 4 * 32, -2.0F, 2.0F), {4, 32}, dt, &sx);
    const Tensor w = make(sgtest::random_floats(rng, 32, 0.5F, 1.5F), {32}, dt, &sw);
    const Tensor b = make(sgtest::random_floats(rng, 32), {32}, dt, &sb);
    const Tensor r = ops::rms_norm(x, w, 1e-5);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_TRUE(all_close(r.to_floats(), ref::rms_norm(sx, sw, 1e-5), half_rtol(dt), kHalfAtol));
    EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5).to_floats(),
                          ref::layer_norm(sx, sw, sb, 1e-5), half_rtol(dt), kHalfAtol));
    EXPECT_TRUE(
        all_close(ops::softmax(x).to_floats(), ref::softmax(sx, 32), half_rtol(dt), kHalfAtol));
  }
}

// ---- rope -----------------------------------------------------------------

TEST(ops_rope, both_styles_random) {
  struct Case {
    std::int64_t t, h, d, pos0;
    double theta;
  };
  const Case cases[] = {{1, 1, 2, 0, 10000.0},   {3, 2, 8, 0, 10000.0},  {1, 4, 16, 37, 10000.0},
                        {5, 3, 6, 11, 500000.0}, {4, 1, 64, 9, 10000.0}, {0, 2, 4, 3, 10000.0}};
  std::mt19937 rng(51);
  for (const auto& c : cases) {
    for (const auto style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
      const bool half = style == ops::RopeStyle::half;
      SCOPED_TRACE("T=" + std::to_string(c.t) + " H=" + std::to_string(c.h) +
                   " D=" + std::to_string(c.d) + " pos0=" + std::to_string(c.pos0) +
                   (half ? " half" : " interleaved"));
      const auto v = sgtest::random_floats(rng, c.t * c.h * c.d);
      const Tensor out = ops::rope(make(v, {c.t, c.h, c.d}), c.pos0, c.theta, style);
      EXPECT_EQ(sgtest::dims_of(out), (Dims{c.t, c.h, c.d}));
      EXPECT_TRUE(all_close(out.to_floats(), ref::rope(v, c.t, c.h, c.d, c.pos0, c.theta, half),
                            0.0, kRopeAtol));
    }
  }
}

TEST(ops_rope, styles_rotate_different_pairs) {
  // x = e_1 (D = 4, position 1): interleaved rotates (0,1) by angle 1 and half
  // rotates (1,3) by angle 1e4^(-1/2) = 0.01.
  const Tensor x = make({0.0F, 1.0F, 0.0F, 0.0F}, {1, 1, 4});
  const auto inter = ops::rope(x, 1, 10000.0, ops::RopeStyle::interleaved).to_floats();
  EXPECT_TRUE(all_close(
      inter, {static_cast<float>(-std::sin(1.0)), static_cast<float>(std::cos(1.0)), 0, 0}, 0.0,
      1e-6));
  const auto half = ops::rope(x, 1, 10000.0, ops::RopeStyle::half).to_floats();
  EXPECT_TRUE(all_close(
      half, {0, static_cast<float>(std::cos(0.01)), 0, static_cast<float>(std::sin(0.01))}, 0.0,
      1e-6));
}

TEST(ops_rope, non_contiguous_and_half_dtypes) {
  std::mt19937 rng(52);
  const std::int64_t t = 3, h = 2, d = 8;
  // x[T, H, D] as a permute of an [H, T, D] tensor (heads-major layout).
  const auto base = sgtest::random_floats(rng, h * t * d);
  const Tensor x = ops::permute(make(base, {h, t, d}), {1, 0, 2});
  const auto v = ref::permute(base, {h, t, d}, {1, 0, 2});
  for (const auto style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
    const bool half = style == ops::RopeStyle::half;
    EXPECT_TRUE(all_close(ops::rope(x, 5, 10000.0, style).to_floats(),
                          ref::rope(v, t, h, d, 5, 1e4, half), 0.0, kRopeAtol));
    for (const DType dt : {DType::f16, DType::bf16}) {
      std::vector<float> stored;
      const Tensor xh = make(v, {t, h, d}, dt, &stored);
      const Tensor out = ops::rope(xh, 5, 10000.0, style);
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(all_close(out.to_floats(), ref::rope(stored, t, h, d, 5, 1e4, half),
                            half_rtol(dt), kHalfAtol));
    }
  }
}

// ---- embedding ------------------------------------------------------------

TEST(ops_embedding, i32_and_i64_ids) {
  std::mt19937 rng(61);
  const std::int64_t vocab = 11, dim = 6;
  const auto w = sgtest::random_floats(rng, vocab * dim);
  const Tensor weight = make(w, {vocab, dim});
  const Dims id_shapes[] = {{5}, {2, 3}, {1}, {0}, {}, {2, 0, 2}};
  for (const DType idt : {DType::i32, DType::i64}) {
    for (const auto& s : id_shapes) {
      SCOPED_TRACE(std::string(sinkgraph::dtype_name(idt)) + " ids " + sgtest::str(s));
      const auto ids = sgtest::random_ints(rng, ref::numel(s), 0, vocab - 1);
      const Tensor out = ops::embedding(weight, Tensor::from_ints(ids, sgtest::to_shape(s), idt));
      Dims want_shape = s;
      want_shape.push_back(dim);
      EXPECT_EQ(sgtest::dims_of(out), want_shape);
      EXPECT_EQ(out.to_floats(), ref::embedding(w, dim, ids));  // a copy: exact
    }
  }
  // First and last rows.
  const Tensor out = ops::embedding(weight, Tensor::from_ints({vocab - 1, 0}, {2}, DType::i32));
  EXPECT_EQ(out.to_floats(), ref::embedding(w, dim, {vocab - 1, 0}));
}

TEST(ops_embedding, non_contiguous_ids_and_weight_and_half) {
  std::mt19937 rng(62);
  const std::int64_t vocab = 9, wide = 10, dim = 4;
  const auto wbase = sgtest::random_floats(rng, vocab * wide);
  // weight: columns 3..7 of a [V, 10] table; ids: transpose of a [3, 2] tensor.
  const Tensor weight = ops::slice(make(wbase, {vocab, wide}), 1, 3, 3 + dim);
  const auto w = ref::slice(wbase, {vocab, wide}, 1, 3, 3 + dim, 1);
  const std::vector<std::int64_t> id_base = {8, 0, 3, 3, 7, 1};
  const Tensor ids = ops::transpose(Tensor::from_ints(id_base, {3, 2}), 0, 1);
  const auto id_vals = ref::permute(id_base, {3, 2}, {1, 0});
  const Tensor out = ops::embedding(weight, ids);
  EXPECT_EQ(sgtest::dims_of(out), (Dims{2, 3, dim}));
  EXPECT_EQ(out.to_floats(), ref::embedding(w, dim, id_vals));
  for (const DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> stored;
    const Tensor wh = make(w, {vocab, dim}, dt, &stored);
    const Tensor oh = ops::embedding(wh, Tensor::from_ints(id_vals, {6}, DType::i32));
    EXPECT_EQ(oh.dtype(), dt);
    EXPECT_EQ(oh.to_floats(), ref::embedding(stored, dim, id_vals));  // rows copied bit for bit
  }
}

// ---- attention ------------------------------------------------------------

struct AttnCase {
  std::int64_t t, hq, hkv, d, cache, seq_len;
  double scale;  // <= 0: the default 1/sqrt(D)
};

void check_attention(const AttnCase& c, std::mt19937& rng) {
  SCOPED_TRACE("T=" + std::to_string(c.t) + " Hq=" + std::to_string(c.hq) +
               " Hkv=" + std::to_string(c.hkv) + " D=" + std::to_string(c.d) +
               " S=" + std::to_string(c.cache) + " seq_len=" + std::to_string(c.seq_len) +
               " scale=" + std::to_string(c.scale));
  const auto q = sgtest::random_floats(rng, c.t * c.hq * c.d, -2.0F, 2.0F);
  const auto k = sgtest::random_floats(rng, c.cache * c.hkv * c.d, -2.0F, 2.0F);
  const auto v = sgtest::random_floats(rng, c.cache * c.hkv * c.d, -2.0F, 2.0F);
  const Tensor out = ops::attention(make(q, {c.t, c.hq, c.d}), make(k, {c.cache, c.hkv, c.d}),
                                    make(v, {c.cache, c.hkv, c.d}), c.seq_len, c.scale);
  EXPECT_EQ(sgtest::dims_of(out), (Dims{c.t, c.hq, c.d}));
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.d));
  EXPECT_TRUE(all_close(out.to_floats(),
                        ref::attention(q, k, v, c.t, c.hq, c.hkv, c.d, c.seq_len, scale), kAttnRtol,
                        kAttnAtol));
}

TEST(ops_attention, decode_and_prefill) {
  const AttnCase cases[] = {
      {1, 4, 2, 8, 16, 1, 0.0},   // decode, first position, grouped-query
      {1, 4, 2, 8, 16, 9, 0.0},   // decode mid-cache
      {1, 4, 2, 8, 16, 16, 0.0},  // decode, full cache
      {4, 4, 2, 8, 16, 4, 0.0},   // prefill from position 0 (pure causal)
      {4, 4, 2, 8, 16, 10, 0.0},  // prefill after 6 cached positions
      {3, 2, 2, 16, 8, 8, 0.0},   // multi-head, full cache
      {2, 6, 1, 4, 5, 3, 0.0},    // multi-query
      {3, 4, 2, 8, 16, 7, 0.3},   // explicit scale
  };
  std::mt19937 rng(71);
  for (const auto& c : cases) check_attention(c, rng);
}

TEST(ops_attention, causal_mask_and_head_grouping) {
  // seq_len == T: query 0 sees only position 0, so its output is v[0] of its
  // kv head; heads 0,1 read kv head 0 and heads 2,3 kv head 1.
  std::mt19937 rng(72);
  const std::int64_t t = 3, d = 4;
  const auto q = sgtest::random_floats(rng, t * 4 * d);
  const auto k = sgtest::random_floats(rng, 5 * 2 * d);
  const auto v = sgtest::random_floats(rng, 5 * 2 * d);
  const auto out =
      ops::attention(make(q, {t, 4, d}), make(k, {5, 2, d}), make(v, {5, 2, d}), t).to_floats();
  for (std::int64_t h = 0; h < 4; ++h) {
    for (std::int64_t c = 0; c < d; ++c) {
      EXPECT_NEAR(out[static_cast<std::size_t>(h * d + c)],
                  v[static_cast<std::size_t>((h / 2) * d + c)], 1e-6)
          << "head " << h << " channel " << c;
    }
  }
}

TEST(ops_attention, strided_cache_and_half_dtypes) {
  std::mt19937 rng(73);
  const std::int64_t t = 2, hq = 4, hkv = 2, d = 8, cache = 6, seq_len = 5;
  const auto q = sgtest::random_floats(rng, t * hq * d);
  // k, v stored heads-major [Hkv, S, D] and viewed as [S, Hkv, D].
  const auto kb = sgtest::random_floats(rng, hkv * cache * d);
  const auto vb = sgtest::random_floats(rng, hkv * cache * d);
  const Tensor k = ops::permute(make(kb, {hkv, cache, d}), {1, 0, 2});
  const Tensor v = ops::permute(make(vb, {hkv, cache, d}), {1, 0, 2});
  const auto kv = ref::permute(kb, {hkv, cache, d}, {1, 0, 2});
  const auto vv = ref::permute(vb, {hkv, cache, d}, {1, 0, 2});
  const double scale = 1.0 / std::sqrt(double(d));
  EXPECT_TRUE(all_close(ops::attention(make(q, {t, hq, d}), k, v, seq_len).to_floats(),
                        ref::attention(q, kv, vv, t, hq, hkv, d, seq_len, scale), kAttnRtol,
                        kAttnAtol));
  for (const DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> sq, sk, sv;
    const Tensor qh = make(q, {t, hq, d}, dt, &sq);
    const Tensor kh = make(kv, {cache, hkv, d}, dt, &sk);
    const Tensor vh = make(vv, {cache, hkv, d}, dt, &sv);
    const Tensor out = ops::attention(qh, kh, vh, seq_len);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_TRUE(all_close(out.to_floats(),
                          ref::attention(sq, sk, sv, t, hq, hkv, d, seq_len, scale), half_rtol(dt),
                          kHalfAtol));
  }
}

// ---- argmax ---------------------------------------------------------------

TEST(ops_argmax, random_shapes) {
  std::mt19937 rng(81);
  const Dims shapes[] = {{7}, {3, 5}, {2, 3, 4}, {4, 1}, {0, 3}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(sgtest::str(s));
    const auto v = sgtest::random_floats(rng, ref::numel(s));
    const Tensor out = ops::argmax(make(v, s));
    EXPECT_EQ(out.dtype(), DType::i64);
    EXPECT_EQ(sgtest::dims_of(out), Dims(s.begin(), s.end() - 1));
    EXPECT_EQ(out.to_ints(), ref::argmax(v, s.back()));
  }
}

TEST(ops_argmax, ties_pick_the_first_index) {
  const Tensor x = make({1, 3, 3, 2, 5, 5, 5, 5, -1, -1, -2, -1}, {3, 4});
  EXPECT_EQ(ops::argmax(x).to_ints(), (std::vector<std::int64_t>{1, 0, 0}));
  const Tensor xi = Tensor::from_ints({4, 9, 9, 9, 0, 2}, {2, 3});
  EXPECT_EQ(ops::argmax(xi).to_ints(), (std::vector<std::int64_t>{1, 0}));
}

// torch.argmax takes NaN for the maximum: the first NaN's index, in every
// float dtype, on short rows and on one long row split into blocks across
// the compute threads (a NaN in a later block beats a larger number in an
// earlier one; a row of 65 blocks leaves the last parts empty).
TEST(ops_argmax, a_nan_is_the_maximum_as_in_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> rows = {1, nan, 3, 2,   nan, 5,   nan, 9,   -inf, -inf, -inf, -inf,
                                   2, inf, 1, nan, nan, nan, nan, nan, 0,    -1,   inf,  inf};
  const std::vector<std::int64_t> want = {1, 0, 0, 3, 0, 2};
  for (const DType dt : {DType::f32, DType::f16, DType::bf16})
    EXPECT_EQ(ops::argmax(make(rows, {6, 4}, dt)).to_ints(), want) << dtype_name(dt);
  const sgtest::ThreadCount restore;
  for (const int threads : {1, 2}) {
    sinkgraph::set_num_threads(threads);
    SCOPED_TRACE(threads);
    std::vector<float> row(100000, 0.0F);
    row[10] = 1e30F;
    EXPECT_EQ(ops::argmax(make(row, {100000})).to_ints(), (std::vector<std::int64_t>{10}));
    row[50000] = nan;
    row[70000] = nan;
    EXPECT_EQ(ops::argmax(make(row, {100000})).to_ints(), (std::vector<std::int64_t>{50000}));
    row[8191] = nan;
    EXPECT_EQ(ops::argmax(make(row, {100000})).to_ints(), (std::vector<std::int64_t>{8191}));
    std::vector<float> blocks65(65 * 8192, 1.0F);
    blocks65.back() = 2.0F;
    EXPECT_EQ(ops::argmax(make(blocks65, {65 * 8192})).to_ints(),
              (std::vector<std::int64_t>{65 * 8192 - 1}));
  }
}

TEST(ops_argmax, strided_and_half_inputs) {
  std::mt19937 rng(82);
  const auto base = sgtest::random_floats(rng, 6 * 4);
  const Tensor x = ops::transpose(make(base, {6, 4}), 0, 1);  // [4, 6], last stride 4
  EXPECT_EQ(ops::argmax(x).to_ints(), ref::argmax(ref::permute(base, {6, 4}, {1, 0}), 6));
  for (const DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> stored;
    const Tensor xh = make(sgtest::random_floats(rng, 5 * 9), {5, 9}, dt, &stored);
    EXPECT_EQ(ops::argmax(xh).to_ints(), ref::argmax(stored, 9));
  }
  const auto ints = sgtest::random_ints(rng, 4 * 7, -50, 50);
  EXPECT_EQ(ops::argmax(Tensor::from_ints(ints, {4, 7}, DType::i32)).to_ints(),
            ref::argmax(ints, 7));
}

// ---- count_nonfinite ----------------------------------------------------------

// Per row, the count of NaN and ±inf, against std::isfinite on the stored
// values: random rows with specials at random places, every float dtype
// (half types store ±inf and NaN, and 65504 or 3e38 stay finite), strided.
TEST(ops_count_nonfinite, random_rows_with_specials_in_every_float_dtype) {
  std::mt19937 rng(83);
  const float specials[] = {NAN, INFINITY, -INFINITY};
  const Dims shapes[] = {{9}, {3, 17}, {2, 3, 40}, {5, 1}, {0, 4}, {4, 0}};
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& s : shapes) {
      SCOPED_TRACE(sgtest::str(s) + " " + std::string(dtype_name(dt)));
      auto v = sgtest::random_floats(rng, ref::numel(s));
      for (auto& x : v) {
        const auto roll = std::uniform_int_distribution<int>(0, 9)(rng);
        if (roll < 3) x = specials[roll];
        if (roll == 3) x = dt == DType::f16 ? 65504.0F : 3e38F;  // largest finite (about, for bf16)
      }
      std::vector<float> stored;
      const Tensor out = ops::count_nonfinite(make(v, s, dt, &stored));
      EXPECT_EQ(out.dtype(), DType::i64);
      EXPECT_EQ(sgtest::dims_of(out), Dims(s.begin(), s.end() - 1));
      const std::int64_t n = s.back();
      std::vector<std::int64_t> want(
          n == 0 ? static_cast<std::size_t>(ref::numel(Dims(s.begin(), s.end() - 1)))
                 : stored.size() / static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < stored.size(); ++i)
        want[i / static_cast<std::size_t>(n)] += !std::isfinite(stored[i]);
      EXPECT_EQ(out.to_ints(), want);
    }
  }
  std::vector<float> base(6 * 4, 1.0F);
  base[5] = NAN;  // row 1, column 1 of the [6, 4] base; column 1 is row 1 of the transpose
  base[13] = INFINITY;
  const Tensor x = ops::transpose(make(base, {6, 4}), 0, 1);  // [4, 6], last stride 4
  EXPECT_EQ(ops::count_nonfinite(x).to_ints(), (std::vector<std::int64_t>{0, 2, 0, 0}));
}

// ---- sample -------------------------------------------------------------------

TEST(ops_sample, matches_the_inverse_cdf_reference_row_by_row) {
  std::mt19937 rng(48);
  for (const double t : {0.3, 1.0, 2.5}) {
    const std::int64_t rows = 64, n = 37;
    const auto v = sgtest::random_floats(rng, rows * n, -3.0F, 3.0F);
    const auto got = ops::sample(make(v, {rows, n}), t, 1234, 17).to_ints();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(v.begin() + r * n, v.begin() + (r + 1) * n);
      const double u = sinkgraph::kernels::counter_uniform(1234, 17, static_cast<std::uint64_t>(r));
      EXPECT_EQ(got[static_cast<std::size_t>(r)], sgtest::ref::sample(row, t, u)) << "row " << r;
    }
  }
}

// Rows longer than a block (8192) are summed block by block (Note
// [Counter-based sampling]): still the inverse-CDF draw, and a row draws the
// same index alone or among other rows.
TEST(ops_sample, long_rows_draw_alike_alone_and_together) {
  std::mt19937 rng(49);
  const std::int64_t rows = 3, n = 30000;
  const auto v = sgtest::random_floats(rng, rows * n, -4.0F, 4.0F);
  for (std::int64_t offset = 0; offset < 8; ++offset) {
    const auto together = ops::sample(make(v, {rows, n}), 1.0, 77, offset).to_ints();
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(v.begin() + r * n, v.begin() + (r + 1) * n);
      const double u = sinkgraph::kernels::counter_uniform(77, static_cast<std::uint64_t>(offset),
                                                           static_cast<std::uint64_t>(r));
      EXPECT_EQ(together[static_cast<std::size_t>(r)], sgtest::ref::sample(row, 1.0, u))
          << "row " << r << ", offset " << offset;
    }
    // Row 0 alone draws u for row 0 too: the same index.
    const std::vector<float> first(v.begin(), v.begin() + n);
    EXPECT_EQ(ops::sample(make(first, {n}), 1.0, 77, offset).to_ints()[0], together[0]);
  }
}

TEST(ops_sample, frequencies_follow_the_softmax) {
  // 40000 rows of the same logits: each row is one independent draw.
  const std::vector<float> logits = {0.0F, 1.0F, 2.0F, -1.0F};
  const std::int64_t rows = 40000;
  std::vector<float> v;
  for (std::int64_t r = 0; r < rows; ++r) v.insert(v.end(), logits.begin(), logits.end());
  for (const double t : {0.7, 1.5}) {
    const auto ids = ops::sample(make(v, {rows, 4}), t, 99, 0).to_ints();
    std::vector<double> count(4, 0.0), p(4, 0.0);
    for (const std::int64_t id : ids) count[static_cast<std::size_t>(id)] += 1;
    double z = 0;
    for (std::size_t i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / t);
    double chi2 = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const double e = rows * p[i] / z;
      chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    EXPECT_LT(chi2, 16.3) << "t = " << t;  // 3 degrees of freedom: p = 0.001
  }
}

TEST(ops_sample, seeds_and_offsets_change_the_draw_and_repeat_exactly) {
  std::mt19937 rng(49);
  const auto v = sgtest::random_floats(rng, 256 * 16, -1.0F, 1.0F);
  const Tensor x = make(v, {256, 16});
  const auto a = ops::sample(x, 1.0, 5, 3).to_ints();
  EXPECT_EQ(ops::sample(x, 1.0, 5, 3).to_ints(), a);
  EXPECT_NE(ops::sample(x, 1.0, 6, 3).to_ints(), a);
  EXPECT_NE(ops::sample(x, 1.0, 5, 4).to_ints(), a);
  // A low temperature is greedy; f16 logits sample like their f32 values.
  EXPECT_EQ(ops::sample(x, 1e-4, 5, 3).to_ints(), ops::argmax(x).to_ints());
  std::vector<float> stored;
  const Tensor h = make(v, {256, 16}, DType::f16, &stored);
  EXPECT_EQ(ops::sample(h, 1.0, 5, 3).to_ints(),
            ops::sample(make(stored, {256, 16}), 1.0, 5, 3).to_ints());
}

TEST(ops_sample, counter_uniform_is_splitmix64) {
  // SplitMix64's published first output from state 0 (Vigna's splitmix64.c).
  EXPECT_EQ(sinkgraph::kernels::splitmix64(0), 0xE220A8397B1DCDAFULL);
  double sum = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const double u = sinkgraph::kernels::counter_uniform(1, i, 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);  // 0.5 +- 3.5 sigma (sigma = 0.0029)
}

}  // namespace

namespace {

// sdpa against a double-precision reference, with q, k and v as column
// slices of one fused projection (strided rows), two batches, several heads.
TEST(ops_nn, sdpa_matches_the_reference_on_strided_slices) {
  const std::int64_t b = 2, l = 5, s = 7, e = 12, heads = 3, d = e / heads;
  std::mt19937 rng(31);
  const auto qkv_q = sgtest::random_floats(rng, b * l * 3 * e, -1, 1);
  const auto kv = sgtest::random_floats(rng, b * s * 3 * e, -1, 1);
  const Tensor fq = make(qkv_q, {b, l, 3 * e});
  const Tensor fkv = make(kv, {b, s, 3 * e});
  const Tensor q = ops::slice(fq, 2, 0, e, 1);
  const Tensor k = ops::slice(fkv, 2, e, 2 * e, 1);
  const Tensor v = ops::slice(fkv, 2, 2 * e, 3 * e, 1);
  const double scale = 0.37;
  const Tensor out = ops::sdpa(q, k, v, heads, scale);
  ASSERT_EQ(sgtest::dims_of(out), (Dims{b, l, e}));
  std::vector<float> want(static_cast<std::size_t>(b * l * e));
  for (std::int64_t bi = 0; bi < b; ++bi) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < l; ++i) {
        std::vector<double> p(static_cast<std::size_t>(s));
        double mx = -1e300, sum = 0;
        for (std::int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) {
            dot += static_cast<double>(qkv_q[(bi * l + i) * 3 * e + h * d + c]) *
                   kv[(bi * s + j) * 3 * e + e + h * d + c];
          }
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (std::int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < s; ++j)
            acc += p[j] / sum * kv[(bi * s + j) * 3 * e + 2 * e + h * d + c];
          want[(bi * l + i) * e + h * d + c] = static_cast<float>(acc);
        }
      }
    }
  }
  EXPECT_TRUE(all_close(out.to_floats(), want, 1e-5, 1e-6));
}

// sdpa_mask's reference: per (batch, head, query) the scaled scores plus the
// mask element mask(b, h, i, j), a softmax in double, and zeros for a row whose
// every key is at -inf (torch's CPU kernel gives zeros there). q, k and v are
// dense [B, L|S, E].
std::vector<float> masked_attention_reference(
    const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
    std::int64_t b, std::int64_t l, std::int64_t s, std::int64_t e, std::int64_t heads,
    double scale,
    const std::function<float(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& mask) {
  const std::int64_t d = e / heads;
  std::vector<float> want(static_cast<std::size_t>(b * l * e));
  for (std::int64_t bi = 0; bi < b; ++bi) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < l; ++i) {
        std::vector<double> p(static_cast<std::size_t>(s));
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c)
            dot += static_cast<double>(q[(bi * l + i) * e + h * d + c]) *
                   k[(bi * s + j) * e + h * d + c];
          p[j] = dot * scale + mask(bi, h, i, j);
          mx = std::max(mx, p[j]);
        }
        for (auto& x : p) sum += (x = std::isinf(mx) ? 0.0 : std::exp(x - mx));
        for (std::int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < s && sum > 0; ++j)
            acc += p[j] / sum * v[(bi * s + j) * e + h * d + c];
          want[(bi * l + i) * e + h * d + c] = static_cast<float>(acc);
        }
      }
    }
  }
  return want;
}

// An additive mask per batch and query, broadcast over heads ([B, 1, L, S]),
// with a padded key block at -inf and one query row that sees no key at all.
TEST(ops_nn, sdpa_mask_matches_the_reference_with_padding_and_a_fully_masked_row) {
  const std::int64_t b = 2, l = 5, s = 7, e = 12, heads = 3;
  std::mt19937 rng(32);
  const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);
  const auto k = sgtest::random_floats(rng, b * s * e, -1, 1);
  const auto v = sgtest::random_floats(rng, b * s * e, -1, 1);
  auto m = sgtest::random_floats(rng, b * l * s, -2, 2);
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < l; ++i)
    for (std::int64_t j = 0; j < 3; ++j) m[(1 * l + i) * s + j] = -inf;  // batch 1: left padding
  for (std::int64_t j = 0; j < s; ++j) m[(0 * l + 2) * s + j] = -inf;    // batch 0, row 2: no key
  const double scale = 0.41;
  const Tensor out = ops::sdpa_mask(make(q, {b, l, e}), make(k, {b, s, e}), make(v, {b, s, e}),
                                    make(m, {b, 1, l, s}), heads, scale);
  ASSERT_EQ(sgtest::dims_of(out), (Dims{b, l, e}));
  const auto want =
      masked_attention_reference(q, k, v, b, l, s, e, heads, scale,
                                 [&](std::int64_t bi, std::int64_t, std::int64_t i,
                                     std::int64_t j) { return m[(bi * l + i) * s + j]; });
  const auto got = out.to_floats();
  EXPECT_TRUE(all_close(got, want, 1e-5, 1e-6));
  for (std::int64_t c = 0; c < e; ++c) EXPECT_EQ(got[2 * e + c], 0.0F) << c;
}

// The row walk's f32 paths (Note [Value rows in registers], score_row_f32 in
// transformer.cpp) by head size (a tail of fewer than eight, one to three
// chunks of eight, a pass of 32 and a tail) and key count (fewer than
// eight, whole eights, eights and a tail): each against the reference, with
// an additive mask that hides some keys and causally; and each query row is
// bitwise the row computed alone.
TEST(ops_nn, sdpa_row_walk_matches_the_reference_across_head_sizes_and_key_counts) {
  const std::int64_t b = 1, l = 5, heads = 2;
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::int64_t d : {4, 8, 16, 24, 40, 76}) {
    for (const std::int64_t s : {3, 8, 13, 31}) {
      SCOPED_TRACE(std::to_string(d) + " head dims, " + std::to_string(s) + " keys");
      const std::int64_t e = heads * d;
      std::mt19937 rng(static_cast<unsigned>(40 + d * 64 + s));
      const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);
      const auto k = sgtest::random_floats(rng, b * s * e, -1, 1);
      const auto v = sgtest::random_floats(rng, b * s * e, -1, 1);
      auto m = sgtest::random_floats(rng, l * s, -2, 2);
      for (std::int64_t i = 0; i < l; ++i) m[i * s + (i * 5) % s] = -inf;
      const Tensor tq = make(q, {b, l, e}), tk = make(k, {b, s, e}), tv = make(v, {b, s, e});
      const Tensor mask = make(m, {1, 1, l, s});
      const Tensor masked = ops::sdpa_mask(tq, tk, tv, mask, heads, 0.3);
      EXPECT_TRUE(
          all_close(masked.to_floats(),
                    masked_attention_reference(q, k, v, b, l, s, e, heads, 0.3,
                                               [&](std::int64_t, std::int64_t, std::int64_t i,
                                                   std::int64_t j) { return m[i * s + j]; }),
                    1e-5, 1e-6));
      EXPECT_TRUE(
          all_close(ops::sdpa_causal(tq, tk, tv, heads, 0.3).to_floats(),
                    masked_attention_reference(q, k, v, b, l, s, e, heads, 0.3,
                                               [&](std::int64_t, std::int64_t, std::int64_t i,
                                                   std::int64_t j) { return j > i ? -inf : 0.0F; }),
                    1e-5, 1e-6));
      const auto all = masked.to_floats();
      for (std::int64_t i = 0; i < l; ++i) {
        const Tensor qi = ops::slice(tq, 1, i, i + 1, 1);
        const Tensor mi = ops::slice(mask, 2, i, i + 1, 1);
        const auto alone = ops::sdpa_mask(qi, tk, tv, mi, heads, 0.3).to_floats();
        for (std::int64_t c = 0; c < e; ++c) {
          ASSERT_EQ(alone[c], all[i * e + c]) << "query " << i << ", column " << c;
        }
      }
    }
  }
}

// One key row [S] expanded to [B, H, L, S] (every stride 0) is the same as
// the dense mask it stands for.
TEST(ops_nn, sdpa_mask_reads_an_expanded_mask_through_its_strides) {
  const std::int64_t b = 2, l = 3, s = 4, e = 8, heads = 2;
  std::mt19937 rng(33);
  const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);
  const auto k = sgtest::random_floats(rng, b * s * e, -1, 1);
  const auto v = sgtest::random_floats(rng, b * s * e, -1, 1);
  const auto row = sgtest::random_floats(rng, s, -3, 3);
  const Tensor mask = ops::expand(make(row, {1, 1, 1, s}), sinkgraph::SymShape{b, heads, l, s});
  const Tensor out =
      ops::sdpa_mask(make(q, {b, l, e}), make(k, {b, s, e}), make(v, {b, s, e}), mask, heads, 0.5);
  const auto want = masked_attention_reference(
      q, k, v, b, l, s, e, heads, 0.5,
      [&](std::int64_t, std::int64_t, std::int64_t, std::int64_t j) { return row[j]; });
  EXPECT_TRUE(all_close(out.to_floats(), want, 1e-5, 1e-6));
}

// is_causal's mask is tril aligned to the top left: query i sees keys 0..i,
// also when there are more keys than queries (or fewer).
TEST(ops_nn, sdpa_causal_is_sdpa_mask_with_the_top_left_tril_mask) {
  const std::int64_t b = 2, e = 8, heads = 2;
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [l, s] : {std::pair<std::int64_t, std::int64_t>{5, 5}, {3, 6}, {6, 3}}) {
    std::mt19937 rng(static_cast<unsigned>(34 + l));
    const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);
    const auto k = sgtest::random_floats(rng, b * s * e, -1, 1);
    const auto v = sgtest::random_floats(rng, b * s * e, -1, 1);
    const Tensor out =
        ops::sdpa_causal(make(q, {b, l, e}), make(k, {b, s, e}), make(v, {b, s, e}), heads, 0.3);
    const auto want =
        masked_attention_reference(q, k, v, b, l, s, e, heads, 0.3,
                                   [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
                                     return j > i ? -inf : 0.0F;
                                   });
    EXPECT_TRUE(all_close(out.to_floats(), want, 1e-5, 1e-6)) << l << " queries, " << s << " keys";
  }
}

TEST(ops_nn, sdpa_mask_errors_name_the_mask) {
  const Tensor q = Tensor::empty({2, 3, 8}, DType::f32);
  const Tensor k = Tensor::empty({2, 4, 8}, DType::f32);
  const auto message = [&](const Tensor& mask) {
    try {
      (void)ops::sdpa_mask(q, k, k, mask, 2, 1.0);
    } catch (const sinkgraph::Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Tensor::empty({2, 2, 3, 5}, DType::f32)).find("sdpa_mask: mask"),
            std::string::npos);  // 5 keys, k has 4
  EXPECT_NE(message(Tensor::empty({3, 1, 3, 4}, DType::f32)).find("does not broadcast"),
            std::string::npos);  // batch 3 against 2
  EXPECT_NE(message(Tensor::empty({3, 4}, DType::f32)).find("mask"), std::string::npos);  // rank 2
  EXPECT_NE(message(Tensor::empty({2, 2, 3, 4}, DType::f16)).find("mask"), std::string::npos);
  EXPECT_EQ(message(Tensor::empty({1, 2, 1, 4}, DType::f32)), "no error");
}

TEST(ops_nn, sdpa_errors_name_the_operator_and_shapes) {
  const Tensor q = Tensor::empty({1, 2, 6}, DType::f32);
  const Tensor k = Tensor::empty({1, 3, 6}, DType::f32);
  const Tensor v4 = Tensor::empty({1, 3, 4}, DType::f32);
  EXPECT_THROW(ops::sdpa(q, k, k, 4, 1.0), sinkgraph::Error);  // 4 heads do not divide 6
  EXPECT_THROW(ops::sdpa(q, k, v4, 2, 1.0), sinkgraph::Error);
  try {
    (void)ops::sdpa(q, k, k, 4, 1.0);
  } catch (const sinkgraph::Error& err) {
    EXPECT_NE(std::string(err.what()).find("sdpa: 4 heads"), std::string::npos) << err.what();
  }
}

// The heads-first form, as torch lays attention out: q[B, H, L, D] and k, v
// k or v [rows, Hkv, D] with every kv head repeated for its query heads:
// [rows, H * D], the embedding form the attention reference reads.
std::vector<float> repeat_kv_heads(const std::vector<float>& t, std::int64_t rows,
                                   std::int64_t heads, std::int64_t kv_heads, std::int64_t d) {
  std::vector<float> out(static_cast<std::size_t>(rows * heads * d));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t c = 0; c < d; ++c)
        out[(r * heads + h) * d + c] = t[(r * kv_heads + h / (heads / kv_heads)) * d + c];
  return out;
}

// [B, Hkv, S, D] read through their strides (permuted views of [B, rows, H,
// D] data, and contiguous copies), grouped kv heads included. The reference
// is the embedding form's, with each kv head repeated for its query heads.
TEST(ops_nn, sdpa_heads_first_form_reads_torchs_layout_in_place_with_grouped_heads) {
  const std::int64_t b = 2, l = 4, s = 6, heads = 4, kv_heads = 2, d = 8, e = heads * d;
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(38);
  const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);             // [B, L, H, D]
  const auto k = sgtest::random_floats(rng, b * s * kv_heads * d, -1, 1);  // [B, S, Hkv, D]
  const auto v = sgtest::random_floats(rng, b * s * kv_heads * d, -1, 1);
  auto m = sgtest::random_floats(rng, b * l * s, -2, 2);  // [B, 1, L, S]
  for (std::int64_t j = 0; j < 2; ++j) m[(1 * l + 1) * s + j] = -inf;
  const auto repeat = [&](const std::vector<float>& t) {
    return repeat_kv_heads(t, b * s, heads, kv_heads, d);
  };
  const auto kr = repeat(k), vr = repeat(v);
  const auto none = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return 0.0F; };
  const auto causal = [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    return j > i ? -inf : 0.0F;
  };
  const auto masked = [&](std::int64_t bi, std::int64_t, std::int64_t i, std::int64_t j) {
    return m[(bi * l + i) * s + j];
  };
  const Tensor mask = make(m, {b, 1, l, s});
  for (const bool strided : {true, false}) {
    SCOPED_TRACE(strided ? "permuted views" : "contiguous");
    const auto heads_first = [&](const std::vector<float>& t, std::int64_t rows, std::int64_t h) {
      const Tensor p = ops::permute(make(t, {b, rows, h, d}), {0, 2, 1, 3});
      return strided ? p : ops::contiguous(p);
    };
    const Tensor tq = heads_first(q, l, heads);
    const Tensor tk = heads_first(k, s, kv_heads);
    const Tensor tv = heads_first(v, s, kv_heads);
    EXPECT_EQ(tq.is_contiguous(), !strided);
    const Tensor plain = ops::sdpa(tq, tk, tv, heads, 0.4);
    EXPECT_EQ(plain.shape(), sinkgraph::Shape({b, l, e}));
    EXPECT_TRUE(all_close(plain.to_floats(),
                          masked_attention_reference(q, kr, vr, b, l, s, e, heads, 0.4, none), 1e-5,
                          1e-6));
    EXPECT_TRUE(all_close(ops::sdpa_causal(tq, tk, tv, heads, 0.4).to_floats(),
                          masked_attention_reference(q, kr, vr, b, l, s, e, heads, 0.4, causal),
                          1e-5, 1e-6));
    EXPECT_TRUE(all_close(ops::sdpa_mask(tq, tk, tv, mask, heads, 0.4).to_floats(),
                          masked_attention_reference(q, kr, vr, b, l, s, e, heads, 0.4, masked),
                          1e-5, 1e-6));
  }
}

TEST(ops_nn, sdpa_heads_first_errors_name_the_shapes) {
  const Tensor q = Tensor::empty({1, 4, 3, 8}, DType::f32);
  const Tensor k = Tensor::empty({1, 2, 5, 8}, DType::f32);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const sinkgraph::Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { (void)ops::sdpa(q, k, k, 4, 1.0); }), "no error");
  EXPECT_NE(message([&] { (void)ops::sdpa(q, k, k, 2, 1.0); }).find("sdpa: 2 heads but q[1,4,3,8]"),
            std::string::npos);
  const Tensor k3 = Tensor::empty({1, 3, 5, 8}, DType::f32);  // 3 kv heads do not divide 4
  EXPECT_NE(message([&] { (void)ops::sdpa(q, k3, k3, 4, 1.0); }).find("not a multiple"),
            std::string::npos);
  const Tensor k6 = Tensor::empty({1, 2, 5, 6}, DType::f32);  // head size 6 against 8
  EXPECT_NE(message([&] { (void)ops::sdpa(q, k6, k6, 4, 1.0); }).find("head size"),
            std::string::npos);
  const Tensor k3d = Tensor::empty({1, 5, 16}, DType::f32);
  EXPECT_NE(message([&] { (void)ops::sdpa(q, k3d, k3d, 4, 1.0); }).find("argument 'k'"),
            std::string::npos);
  EXPECT_NE(message([&] {
              (void)ops::sdpa_mask(q, k, k, Tensor::empty({1, 1, 3, 4}, DType::f32), 4, 1.0);
            }).find("keys"),
            std::string::npos);  // the mask has 4 keys, k has 5
}

// Note [Long attention through products] (transformer.cpp): past 32 query
// rows and keys, f32 attention runs as two oneDNN products per head with a
// softmax between them where the build has oneDNN; the row walk otherwise
// (set_use_onednn(false)). Both against the double reference: plain, masked
// with a padded block and a row that sees no key, causal with more and fewer
// keys than queries, the embedding form's strided slices and the heads-first
// form with grouped kv heads; 1, 2 and 3 compute threads give the same bits.
class LongAttention : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !ops::onednn_built()) GTEST_SKIP() << "built without oneDNN";
    ops::set_use_onednn(GetParam());
  }
  void TearDown() override { ops::set_use_onednn(ops::onednn_built()); }

  // f() at 1, 2 and 3 threads: equal bits, close to `want`, on this instance's path.
  template <typename F>
  void check(const char* what, F&& f, const std::vector<float>& want) {
    const sgtest::ThreadCount restore;
    std::vector<float> first;
    for (const int threads : {1, 2, 3}) {
      sinkgraph::set_num_threads(threads);
      const std::uint64_t before = ops::onednn_matmul_calls();
      const auto got = f().to_floats();
      EXPECT_EQ(ops::onednn_matmul_calls() > before, GetParam()) << what;
      EXPECT_TRUE(all_close(got, want, 1e-4, 1e-5)) << what << " at " << threads << " threads";
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(got, first) << what << ": " << threads << " threads differ from one";
      }
    }
  }
};

TEST_P(LongAttention, matches_the_reference_plain_masked_and_causal) {
  const std::int64_t b = 2, e = 32, heads = 2;
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [l, s] : {std::pair<std::int64_t, std::int64_t>{40, 45}, {50, 37}}) {
    std::mt19937 rng(static_cast<unsigned>(90 + l));
    // q, k and v as column slices of wider rows (strided, as from one fused projection).
    const auto wq = sgtest::random_floats(rng, b * l * 2 * e, -1, 1);
    const auto wkv = sgtest::random_floats(rng, b * s * 2 * e, -1, 1);
    const Tensor q = ops::slice(make(wq, {b, l, 2 * e}), 2, e, 2 * e, 1);
    const Tensor k = ops::slice(make(wkv, {b, s, 2 * e}), 2, 0, e, 1);
    const Tensor v = ops::slice(make(wkv, {b, s, 2 * e}), 2, e, 2 * e, 1);
    const auto dense = [&](const Tensor& t) { return ops::contiguous(t).to_floats(); };
    const auto qd = dense(q), kd = dense(k), vd = dense(v);
    auto m = sgtest::random_floats(rng, b * l * s, -2, 2);
    for (std::int64_t i = 0; i < l; ++i)
      for (std::int64_t j = 0; j < 5; ++j) m[(1 * l + i) * s + j] = -inf;  // batch 1: padding
    for (std::int64_t j = 0; j < s; ++j) m[(0 * l + 33) * s + j] = -inf;   // a row sees no key
    const auto ref = [&](const auto& mask) {
      return masked_attention_reference(qd, kd, vd, b, l, s, e, heads, 0.3, mask);
    };
    const auto none = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return 0.0F; };
    SCOPED_TRACE(std::to_string(l) + " queries, " + std::to_string(s) + " keys");
    check(
        "sdpa", [&] { return ops::sdpa(q, k, v, heads, 0.3); }, ref(none));
    check(
        "sdpa_causal", [&] { return ops::sdpa_causal(q, k, v, heads, 0.3); },
        ref([&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
          return j > i ? -inf : 0.0F;
        }));
    const Tensor mask = make(m, {b, 1, l, s});
    check(
        "sdpa_mask", [&] { return ops::sdpa_mask(q, k, v, mask, heads, 0.3); },
        ref([&](std::int64_t bi, std::int64_t, std::int64_t i, std::int64_t j) {
          return m[(bi * l + i) * s + j];
        }));
  }
}

TEST_P(LongAttention, heads_first_with_grouped_kv_heads) {
  const std::int64_t b = 1, l = 36, s = 41, heads = 4, kv_heads = 2, d = 16, e = heads * d;
  std::mt19937 rng(95);
  const auto q = sgtest::random_floats(rng, b * l * e, -1, 1);             // [B, L, H, D]
  const auto k = sgtest::random_floats(rng, b * s * kv_heads * d, -1, 1);  // [B, S, Hkv, D]
  const auto v = sgtest::random_floats(rng, b * s * kv_heads * d, -1, 1);
  const auto repeat = [&](const std::vector<float>& t) {
    return repeat_kv_heads(t, b * s, heads, kv_heads, d);
  };
  const auto first = [&](const std::vector<float>& t, std::int64_t rows, std::int64_t h) {
    return ops::permute(make(t, {b, rows, h, d}), {0, 2, 1, 3});  // a view: strided heads
  };
  const auto none = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return 0.0F; };
  check(
      "sdpa heads-first",
      [&] {
        return ops::sdpa(first(q, l, heads), first(k, s, kv_heads), first(v, s, kv_heads), heads,
                         0.25);
      },
      masked_attention_reference(q, repeat(k), repeat(v), b, l, s, e, heads, 0.25, none));
}

INSTANTIATE_TEST_SUITE_P(ops_nn, LongAttention, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "onednn" : "row_walk";
                         });

}  // namespace
