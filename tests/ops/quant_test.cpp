// linear_q and embedding_q (Note [Quantized weights] in include/sinkgraph/ops.h)
// against the sums Note [Activations quantized per block] documents, written
// out here, and a float64 reference over values decoded here from ggml's
// block layouts, within the error the note bounds; plus the kernel's own
// promises: the vector and portable paths agree, a row's result does not
// depend on its batch or the thread count, odd strides give the same values,
// non-finite activations give NaN, and bad arguments are clear errors.
#include "kernels/cpu/quant.h"  // internal: the tests build with src/ on the include path

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/device.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"

namespace {

namespace sg = sinkgraph;
namespace ops = sinkgraph::ops;
namespace quant = sinkgraph::kernels::cpu::quant;
using sg::Tensor;

// Random rows of blocks: an f16 scale in [-0.05, 0.05] (never inf or NaN),
// then random bytes (every int8, every nibble).
std::vector<std::int64_t> random_blocks(ops::QuantFormat f, std::int64_t rows, std::int64_t k,
                                        std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(-0.05F, 0.05F);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::int64_t bb = ops::quant_block_bytes(f);
  std::vector<std::int64_t> out;
  for (std::int64_t b = 0; b < rows * k / 32; ++b) {
    const std::uint16_t d = sg::f32_to_f16(scale(rng));
    out.push_back(d & 0xFF);
    out.push_back(d >> 8);
    for (std::int64_t j = 2; j < bb; ++j) out.push_back(byte(rng));
  }
  return out;
}

// The blocks of `bytes` as the u8 weight tensor [n, K / 32 blocks] linear_q takes.
Tensor weight_of(ops::QuantFormat f, const std::vector<std::int64_t>& bytes, std::int64_t n,
                 std::int64_t k) {
  return Tensor::from_ints(bytes, {n, k / 32 * ops::quant_block_bytes(f)}, sg::DType::u8);
}

// Value j of a row of blocks as its integer and its block's scale, decoded
// from the layout (ggml's dequantize_row_q8_0 / q4_0), independently of the
// kernels.
std::int64_t int_value(ops::QuantFormat f, const std::vector<std::int64_t>& row_bytes,
                       std::int64_t j) {
  const std::int64_t bb = ops::quant_block_bytes(f);
  const auto* block = row_bytes.data() + j / 32 * bb;
  const std::int64_t i = j % 32;
  if (f == ops::QuantFormat::q8_0) return static_cast<std::int8_t>(block[2 + i]);
  const std::int64_t byte = block[2 + i % 16];
  return (i < 16 ? byte & 0x0F : byte >> 4) - 8;
}
float scale_of(ops::QuantFormat f, const std::vector<std::int64_t>& row_bytes, std::int64_t b) {
  const auto* block = row_bytes.data() + b * ops::quant_block_bytes(f);
  return sg::f16_to_f32(static_cast<std::uint16_t>(block[0] | (block[1] << 8)));
}
double value(ops::QuantFormat f, const std::vector<std::int64_t>& row_bytes, std::int64_t j) {
  return static_cast<double>(scale_of(f, row_bytes, j / 32)) *
         static_cast<double>(int_value(f, row_bytes, j));
}

// Note [Activations quantized per block] (src/kernels/cpu/quant.h), written
// out here from its words: x's blocks quantized to [-127, 127] with scale
// amax / 127, eight exact lane sums of four products, one fused
// multiply-add per lane and block, the lanes reduced in the note's order.
struct QuantizedX {
  std::vector<int> q;
  std::vector<float> d;
};
QuantizedX quantize_as_documented(const float* x, std::int64_t k) {
  QuantizedX out;
  for (std::int64_t b = 0; b < k / 32; ++b) {
    float amax = 0;
    bool finite = true;
    for (std::int64_t j = 0; j < 32; ++j) {
      finite = finite && std::isfinite(x[b * 32 + j]);
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
    }
    const bool zero = !finite || amax < 0x1p-100F;
    out.d.push_back(!finite ? std::numeric_limits<float>::quiet_NaN()
                    : zero  ? 0.0F
                            : amax / 127.0F);
    for (std::int64_t j = 0; j < 32; ++j)
      out.q.push_back(zero ? 0 : static_cast<int>(std::nearbyint(x[b * 32 + j] * (127.0F / amax))));
  }
  return out;
}
float documented_dot(ops::QuantFormat f, const std::vector<std::int64_t>& row_bytes,
                     const QuantizedX& x, std::int64_t k) {
  float sets[2][8] = {};  // the even and the odd blocks' lanes
  for (std::int64_t b = 0; b < k / 32; ++b) {
    const float d = scale_of(f, row_bytes, b) * x.d[static_cast<std::size_t>(b)];
    for (std::int64_t l = 0; l < 8; ++l) {
      std::int64_t s = 0;
      for (std::int64_t j = b * 32 + 4 * l; j < b * 32 + 4 * l + 4; ++j)
        s += int_value(f, row_bytes, j) * x.q[static_cast<std::size_t>(j)];
      sets[b % 2][l] = std::fma(static_cast<float>(s), d, sets[b % 2][l]);
    }
  }
  float lanes[8];
  for (int l = 0; l < 8; ++l) lanes[l] = sets[0][l] + sets[1][l];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
         ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

std::vector<float> random_floats(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

struct Case {
  ops::QuantFormat format;
  std::int64_t n, k;
};

class QuantLinear : public ::testing::TestWithParam<ops::QuantFormat> {};

// Every result is the note's sum bitwise, and within the error the
// quantized activations allow of a float64 reference over the decoded
// weights: sum over blocks of (amax / 127) / 2 * sum |w_j|, plus f32
// rounding.
TEST_P(QuantLinear, matches_the_documented_sums_and_a_float64_reference_for_every_row_count) {
  const ops::QuantFormat f = GetParam();
  double worst = 0;  // the largest error seen, as a fraction of its bound
  for (const Case c : {Case{f, 37, 64}, Case{f, 5, 32}, Case{f, 3, 96}, Case{f, 130, 320}}) {
    const std::vector<std::int64_t> bytes = random_blocks(f, c.n, c.k, 1);
    const std::int64_t width = c.k / 32 * ops::quant_block_bytes(f);
    const Tensor w = weight_of(f, bytes, c.n, c.k);
    for (const std::int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
      SCOPED_TRACE("n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " m " +
                   std::to_string(m));
      const std::vector<float> x = random_floats(m * c.k, 2);
      const std::vector<float> got =
          ops::linear_q(Tensor::from_floats(x, {m, c.k}), w, f).to_floats();
      ASSERT_EQ(got.size(), static_cast<std::size_t>(m * c.n));
      for (std::int64_t i = 0; i < m; ++i) {
        const float* xi = x.data() + i * c.k;
        const QuantizedX xq = quantize_as_documented(xi, c.k);
        for (std::int64_t r = 0; r < c.n; ++r) {
          const std::vector<std::int64_t> row(bytes.begin() + r * width,
                                              bytes.begin() + (r + 1) * width);
          const float g = got[static_cast<std::size_t>(i * c.n + r)];
          ASSERT_EQ(std::bit_cast<std::uint32_t>(g),
                    std::bit_cast<std::uint32_t>(documented_dot(f, row, xq, c.k)))
              << "row " << i << " output " << r;
          double want = 0;
          double scale = 0;
          double bound = 0;
          for (std::int64_t j = 0; j < c.k; ++j) {
            const double wj = value(f, row, j);
            want += xi[j] * wj;
            scale += std::abs(xi[j] * wj);
            bound += static_cast<double>(xq.d[static_cast<std::size_t>(j / 32)]) / 2 * std::abs(wj);
          }
          bound += 1e-6 * scale + 1e-7;
          EXPECT_LE(std::abs(g - want), bound) << "row " << i << " output " << r;
          worst = std::max(worst, std::abs(g - want) / bound);
        }
      }
    }
  }
  RecordProperty("largest_error_of_bound", std::to_string(worst));
}

TEST_P(QuantLinear, vector_and_portable_paths_agree_and_rows_do_not_depend_on_their_batch) {
  const ops::QuantFormat f = GetParam();
  const auto kf = static_cast<quant::Format>(f);
  const std::int64_t k = 256;
  const std::vector<std::int64_t> wide = random_blocks(f, 1, k, 3);
  const std::vector<std::uint8_t> row(wide.begin(), wide.end());
  const std::vector<float> x = random_floats(4 * k, 4);
  std::vector<std::int8_t> q(static_cast<std::size_t>(4 * k));
  std::vector<float> d(static_cast<std::size_t>(4 * k / 32));
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(4 * k / 4));
  quant::QuantizedRow xs[4];
  for (std::int64_t r = 0; r < 4; ++r) {
    quant::quantize_row(x.data() + r * k, k, q.data() + r * k, d.data() + r * k / 32,
                        offsets.data() + r * k / 4);
    xs[r] = {q.data() + r * k, d.data() + r * k / 32, offsets.data() + r * k / 4};
  }
  // Q4_0's offsets (Note [Q4_0's nibbles as they are]), from their definition.
  for (std::int64_t i = 0; i < 4 * k / 4; ++i) {
    std::int32_t sum = 0;
    for (std::int64_t j = 4 * i; j < 4 * i + 4; ++j) sum += q[static_cast<std::size_t>(j)];
    ASSERT_EQ(offsets[static_cast<std::size_t>(i)], -8 * sum) << "lane " << i;
  }
  float four[4];
  float* fo[4] = {&four[0], &four[1], &four[2], &four[3]};
  quant::dot_rows<4>(kf, row.data(), k / 32, xs, fo);
  float portable[4];
  float* po[4] = {&portable[0], &portable[1], &portable[2], &portable[3]};
  quant::dot_rows_portable<4>(kf, row.data(), k / 32, xs, po);
  for (int r = 0; r < 4; ++r) {
    float one = 0;
    float* oo[1] = {&one};
    quant::dot_rows<1>(kf, row.data(), k / 32, &xs[r], oo);
    EXPECT_EQ(std::memcmp(&one, &four[r], sizeof one), 0) << "row " << r;  // bitwise
    EXPECT_EQ(std::memcmp(&portable[r], &four[r], sizeof one), 0) << "row " << r;
  }
  // Through the operator: rows alone and in batches of 2, 3 and 7, and one
  // or two compute threads, bitwise alike.
  const std::int64_t n = 300;
  const std::vector<std::int64_t> bytes = random_blocks(f, n, k, 5);
  const Tensor w = weight_of(f, bytes, n, k);
  const std::vector<float> xb = random_floats(7 * k, 6);
  const std::vector<float> all = ops::linear_q(Tensor::from_floats(xb, {7, k}), w, f).to_floats();
  for (const std::int64_t m : {1, 2, 3}) {
    const std::vector<float> part(xb.begin(), xb.begin() + m * k);
    const std::vector<float> got =
        ops::linear_q(Tensor::from_floats(part, {m, k}), w, f).to_floats();
    EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * sizeof(float)), 0) << "m " << m;
  }
  const int threads = sg::num_threads();
  sg::set_num_threads(threads == 1 ? 2 : 1);
  const std::vector<float> other = ops::linear_q(Tensor::from_floats(xb, {7, k}), w, f).to_floats();
  sg::set_num_threads(threads);
  EXPECT_EQ(other, all);
}

// The extremes: weights of -128 (Q8_0's one value without a positive
// twin, whose |w| is 128 as an unsigned byte) and of -8 (Q4_0), against
// activations at +-127, where a 16-bit pair sum would be closest to
// saturating; every sum still the documented one.
TEST_P(QuantLinear, extreme_values_give_the_documented_sums) {
  const ops::QuantFormat f = GetParam();
  const std::int64_t k = 64;
  const std::int64_t bb = ops::quant_block_bytes(f);
  std::vector<std::int64_t> bytes;
  for (std::int64_t b = 0; b < k / 32; ++b) {
    const std::uint16_t d = sg::f32_to_f16(0.5F);
    bytes.push_back(d & 0xFF);
    bytes.push_back(d >> 8);
    for (std::int64_t j = 2; j < bb; ++j) bytes.push_back(f == ops::QuantFormat::q8_0 ? 0x80 : 0);
  }
  const Tensor w = weight_of(f, bytes, 1, k);
  for (const float sign : {1.0F, -1.0F}) {
    std::vector<float> x(static_cast<std::size_t>(k));
    for (std::int64_t j = 0; j < k; ++j) x[j] = sign * (j % 3 == 0 ? -2.0F : 2.0F);
    const float got = ops::linear_q(Tensor::from_floats(x, {1, k}), w, f).to_floats()[0];
    EXPECT_EQ(got, documented_dot(f, bytes, quantize_as_documented(x.data(), k), k));
    double want = 0;  // every x is +-amax, so q is +-127: only the scales round
    for (std::int64_t j = 0; j < k; ++j) want += x[j] * value(f, bytes, j);
    EXPECT_NEAR(got, want, 1e-6 * std::abs(want));
  }
}

// A non-finite activation makes its row's results NaN (Note [Activations
// quantized per block]): never a finite number, as an f32 product would
// not give one. A block of values below 2^-100 counts as zeros.
TEST_P(QuantLinear, non_finite_activations_give_nan_and_tiny_blocks_count_as_zero) {
  const ops::QuantFormat f = GetParam();
  const std::int64_t n = 9;
  const std::int64_t k = 96;
  const std::vector<std::int64_t> bytes = random_blocks(f, n, k, 11);
  const Tensor w = weight_of(f, bytes, n, k);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = random_floats(2 * k, 12);
    x[static_cast<std::size_t>(k + 40)] = bad;  // row 1, block 1
    const std::vector<float> got = ops::linear_q(Tensor::from_floats(x, {2, k}), w, f).to_floats();
    for (std::int64_t r = 0; r < n; ++r) {
      EXPECT_TRUE(std::isfinite(got[static_cast<std::size_t>(r)])) << r;  // row 0 untouched
      EXPECT_TRUE(std::isnan(got[static_cast<std::size_t>(n + r)])) << bad << ", output " << r;
    }
  }
  std::vector<float> x = random_floats(k, 13);
  const std::vector<float> zeroed = [&] {
    std::vector<float> z = x;
    for (std::int64_t j = 32; j < 64; ++j) z[j] = 0;
    return ops::linear_q(Tensor::from_floats(z, {1, k}), w, f).to_floats();
  }();
  for (std::int64_t j = 32; j < 64; ++j) x[j] = 1e-39F * static_cast<float>(j - 40);
  EXPECT_EQ(ops::linear_q(Tensor::from_floats(x, {1, k}), w, f).to_floats(), zeroed);
}

// Each activation is within half a step of its quantized value, the
// largest of a block is exactly +-127 steps, and none leaves [-127, 127].
TEST(ops_quant, activations_quantize_within_half_a_step) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> exponent(-30.0F, 30.0F);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  for (int trial = 0; trial < 2000; ++trial) {
    const float magnitude = std::exp2(exponent(rng));
    float x[32];
    for (float& v : x) v = u(rng) * magnitude;
    std::int8_t q[32];
    float d = 0;
    quant::quantize_block(x, q, &d);
    int largest = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_GE(q[j], -127);
      largest = std::max(largest, std::abs(static_cast<int>(q[j])));
      ASSERT_LE(std::abs(static_cast<double>(x[j]) - static_cast<double>(d) * q[j]),
                0.5 * d * (1 + 1e-6))
          << "trial " << trial << ", value " << j;
    }
    ASSERT_EQ(largest, 127) << "trial " << trial;
  }
}

#if SG_QUANT_VECTOR
// The vector quantizer gives the portable one's bits (values, scale and
// Q4_0 offsets) for blocks of every magnitude, values halfway between two
// steps (rounded to even by both), the largest |x| anywhere in the block,
// and blocks with an infinity, a NaN or nothing above the tiny bound
// (zeros, checked as such).
TEST(ops_quant, vector_quantizer_gives_the_portable_bits) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> exponent(-110.0F, 110.0F);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::uniform_int_distribution<int> step(-127, 126);  // x within [-126.5, 126.5]
  std::uniform_int_distribution<int> position(0, 31);
  for (int trial = 0; trial < 20000; ++trial) {
    float x[32];
    const int kind = trial % 5;
    if (kind == 3) {
      // Halfway values: amax 127 (id = 1), so x * id = step + 0.5 exactly.
      for (float& v : x) v = static_cast<float>(step(rng)) + 0.5F;
      x[position(rng)] = (trial % 2 == 0) ? 127.0F : -127.0F;
    } else {
      // kind 2: every |x| below the tiny bound, 2^-100
      const float magnitude = kind == 2 ? std::exp2(-101.0F - std::fabs(0.1F * exponent(rng)))
                                        : std::exp2(exponent(rng));
      for (float& v : x) v = u(rng) * magnitude;
    }
    if (kind == 4) {
      const float bad[] = {std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
      x[position(rng)] = bad[trial % 3];
    }
    std::int8_t want_q[32];
    float want_d = 0;
    std::int32_t want_offsets[8];
    quant::quantize_block_portable(x, want_q, &want_d);
    quant::q4_offsets_portable(want_q, want_offsets);
    if (kind == 2) {  // zeros, as the note says
      ASSERT_EQ(want_d, 0.0F) << "trial " << trial;
      ASSERT_TRUE(std::all_of(want_q, want_q + 32, [](std::int8_t v) { return v == 0; }));
    }
    std::int8_t got_q[32];
    float got_d = 0;
    std::int32_t got_offsets[8];
    quant::quantize_row(x, 32, got_q, &got_d, got_offsets);
    ASSERT_EQ(std::memcmp(got_q, want_q, sizeof got_q), 0) << "trial " << trial;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got_d), std::bit_cast<std::uint32_t>(want_d))
        << "trial " << trial;
    ASSERT_EQ(std::memcmp(got_offsets, want_offsets, sizeof got_offsets), 0) << "trial " << trial;
    std::int8_t alone[32];
    float alone_d = 0;
    quant::quantize_block(x, alone, &alone_d);
    ASSERT_EQ(std::memcmp(alone, want_q, sizeof alone), 0) << "trial " << trial;
  }
}

// The vector path's weight values are the portable decoding's, for every
// byte value: Q8_0's bytes as loaded, Q4_0's nibbles (q4_nibbles, Note
// [Q4_0's nibbles as they are]) the portable values plus 8.
TEST_P(QuantLinear, block_values_in_a_register_are_the_portable_ones) {
  const auto kf = static_cast<quant::Format>(GetParam());
  const std::int64_t bb = quant::block_bytes(kf);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4096; ++trial) {
    std::vector<std::uint8_t> block(static_cast<std::size_t>(bb));
    for (std::int64_t j = 0; j < bb; ++j)
      block[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>((trial + j * 37) ^ rng());
    std::int8_t want[32];
    quant::block_values(kf, block.data(), want);
    std::int8_t got[32];
    if (kf == quant::Format::q8_0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(got), quant::load32(block.data() + 2));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(got), quant::q4_nibbles(block.data()));
      for (std::int8_t& v : want) v = static_cast<std::int8_t>(v + 8);
    }
    ASSERT_EQ(std::memcmp(got, want, sizeof got), 0) << "trial " << trial;
  }
}
#endif

TEST_P(QuantLinear, strided_and_batched_inputs_give_the_same_values) {
  const ops::QuantFormat f = GetParam();
  const std::int64_t n = 24;
  const std::int64_t k = 64;
  const std::vector<std::int64_t> bytes = random_blocks(f, n, k, 7);
  const Tensor w = weight_of(f, bytes, n, k);
  const std::vector<float> x = random_floats(6 * k, 8);
  const Tensor contiguous = Tensor::from_floats(x, {6, k});
  const std::vector<float> want = ops::linear_q(contiguous, w, f).to_floats();
  // x as [2, 3, K]: the leading dims fold.
  EXPECT_EQ(ops::linear_q(Tensor::from_floats(x, {2, 3, k}), w, f).to_floats(), want);
  // x as the transpose of a [K, 6] tensor: no adjacent values in a row.
  std::vector<float> xt(x.size());
  for (std::int64_t i = 0; i < 6; ++i) {
    for (std::int64_t j = 0; j < k; ++j) xt[j * 6 + i] = x[i * k + j];
  }
  const Tensor t = Tensor::from_floats(xt, {k, 6}).transpose(0, 1);
  EXPECT_EQ(ops::linear_q(t, w, f).to_floats(), want);
}

TEST_P(QuantLinear, embedding_q_gives_the_decoded_rows) {
  const ops::QuantFormat f = GetParam();
  const std::int64_t vocab = 10;
  const std::int64_t dim = 96;
  const std::int64_t width = dim / 32 * ops::quant_block_bytes(f);
  const std::vector<std::int64_t> bytes = random_blocks(f, vocab, dim, 9);
  const Tensor w = Tensor::from_ints(bytes, {vocab, width}, sg::DType::u8);
  const std::vector<std::int64_t> ids = {3, 0, 9, 3};
  const Tensor out = ops::embedding_q(w, Tensor::from_ints(ids, {2, 2}), f);
  EXPECT_EQ(out.shape(), (sg::Shape{2, 2, dim}));
  const std::vector<float> got = out.to_floats();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::vector<std::int64_t> row(bytes.begin() + ids[i] * width,
                                        bytes.begin() + (ids[i] + 1) * width);
    for (std::int64_t j = 0; j < dim; ++j)
      EXPECT_EQ(got[i * dim + j], static_cast<float>(value(f, row, j))) << i << ", " << j;
  }
  const Tensor bad = ops::embedding_q(w, Tensor::from_ints({1, 10}, {2}), f);
  try {
    (void)bad.to_floats();
    ADD_FAILURE() << "an id out of range was not reported";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 10"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ops::embedding_q(w, Tensor::from_ints({2}, {1}), f).to_floats().size(),
            static_cast<std::size_t>(dim));  // the stream works again
}

// linear_q keeps its buffers for the activations' blocks from call to call
// (per thread): a call must give its own values whatever ran before it, a
// larger or smaller product, the other format, a strided x, on this thread
// or from several streams at once.
TEST(ops_quant, calls_of_any_size_in_any_order_give_their_own_values) {
  struct Product {
    ops::QuantFormat f;
    std::int64_t m, n, k;
    bool transposed;
  };
  const std::vector<Product> cases = {
      {ops::QuantFormat::q4_0, 1, 40, 64, false},   {ops::QuantFormat::q8_0, 9, 24, 256, false},
      {ops::QuantFormat::q4_0, 7, 33, 160, true},   {ops::QuantFormat::q8_0, 1, 8, 32, true},
      {ops::QuantFormat::q4_0, 16, 12, 512, false}, {ops::QuantFormat::q8_0, 3, 50, 96, false},
  };
  struct Inputs {
    Tensor x, w;
  };
  std::vector<Inputs> inputs;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Product& cs = cases[c];
    const auto seed = static_cast<std::uint32_t>(100 + c);
    const std::vector<float> x = random_floats(cs.m * cs.k, seed);
    Tensor xt = Tensor::from_floats(x, {cs.m, cs.k});
    if (cs.transposed) {
      std::vector<float> t(x.size());
      for (std::int64_t i = 0; i < cs.m; ++i) {
        for (std::int64_t j = 0; j < cs.k; ++j) t[j * cs.m + i] = x[i * cs.k + j];
      }
      xt = Tensor::from_floats(t, {cs.k, cs.m}).transpose(0, 1);
    }
    inputs.push_back({xt, weight_of(cs.f, random_blocks(cs.f, cs.n, cs.k, seed), cs.n, cs.k)});
  }
  sg::current_stream().synchronize();  // the inputs' copies, before other streams read them
  const auto run = [&](std::size_t c) {
    return ops::linear_q(inputs[c].x, inputs[c].w, cases[c].f).to_floats();
  };
  // Each case first on a stream whose worker ran nothing else (the
  // documented sums are checked against float64 above; here the values must
  // not move).
  std::vector<std::vector<float>> want(cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c) {
    auto stream = sg::cpu().create_stream();
    const sg::StreamGuard guard(*stream);
    want[c] = run(c);
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const std::size_t c = round == 1 ? cases.size() - 1 - i : (i * 5 + round) % cases.size();
      ASSERT_EQ(run(c), want[c]) << "case " << c << ", round " << round;
    }
  }
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto stream = sg::cpu().create_stream();  // a worker thread of its own
      const sg::StreamGuard guard(*stream);
      for (int i = 0; i < 60; ++i) {
        const auto c = static_cast<std::size_t>((i * (t + 1) + t) % static_cast<int>(cases.size()));
        if (run(c) != want[c]) ++wrong[static_cast<std::size_t>(t)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

INSTANTIATE_TEST_SUITE_P(ops_quant, QuantLinear,
                         ::testing::Values(ops::QuantFormat::q8_0, ops::QuantFormat::q4_0),
                         [](const auto& p) { return ops::quant_format_name(p.param); });

void expect_error(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << part;
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ops_quant, bad_arguments_are_clear_errors) {
  const Tensor w8 = Tensor::from_ints(std::vector<std::int64_t>(2 * 68, 0), {2, 68}, sg::DType::u8);
  const Tensor x = Tensor::from_floats(std::vector<float>(64, 1.0F), {1, 64});
  expect_error([&] { (void)ops::linear_q(x, x, ops::QuantFormat::q8_0); },
               "w has dtype f32; expected u8 blocks of q8_0");
  expect_error([&] { (void)ops::linear_q(x, w8, ops::QuantFormat::q4_0); },
               "rows of 68 bytes are not whole q4_0 blocks of 18 bytes");
  const Tensor x32 = Tensor::from_floats(std::vector<float>(32, 1.0F), {1, 32});
  expect_error([&] { (void)ops::linear_q(x32, w8, ops::QuantFormat::q8_0); },
               "has K=32 but w[2,68] holds rows of K=64 values");
  const Tensor xi = Tensor::from_ints(std::vector<std::int64_t>(64, 1), {1, 64});
  expect_error([&] { (void)ops::linear_q(xi, w8, ops::QuantFormat::q8_0); },
               "x has dtype i64; expected f32");
  expect_error([&] { (void)ops::add(w8, w8); }, "u8 tensors are not supported");
  expect_error([&] { (void)sg::Tensor::from_ints({256}, {1}, sg::DType::u8); }, "does not fit u8");
}

}  // namespace
