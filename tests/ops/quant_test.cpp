// linear_q and embedding_q (Note [Quantized weights] in include/sinkgraph/ops.h)
// against a float64 reference over values decoded here from ggml's block
// layouts, plus the kernel's own promises: the vector and portable paths
// agree, a row's result does not depend on its batch or the thread count,
// odd strides give the same values, and bad arguments are clear errors.
#include "kernels/cpu/quant.h"  // internal: the tests build with src/ on the include path

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
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

// Value j of a row of blocks, decoded from the layout (ggml's
// dequantize_row_q8_0 / q4_0), independently of the kernels.
double value(ops::QuantFormat f, const std::vector<std::int64_t>& row_bytes, std::int64_t j) {
  const std::int64_t bb = ops::quant_block_bytes(f);
  const std::int64_t b = j / 32;
  const std::int64_t i = j % 32;
  const auto* block = row_bytes.data() + b * bb;
  const double d = sg::f16_to_f32(static_cast<std::uint16_t>(block[0] | (block[1] << 8)));
  if (f == ops::QuantFormat::q8_0) return d * static_cast<std::int8_t>(block[2 + i]);
  const std::int64_t byte = block[2 + i % 16];
  return d * static_cast<double>((i < 16 ? byte & 0x0F : byte >> 4) - 8);
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

TEST_P(QuantLinear, matches_a_float64_reference_for_every_row_count) {
  const ops::QuantFormat f = GetParam();
  for (const Case c : {Case{f, 37, 64}, Case{f, 5, 32}, Case{f, 130, 320}}) {
    const std::vector<std::int64_t> bytes = random_blocks(f, c.n, c.k, 1);
    const std::int64_t width = c.k / 32 * ops::quant_block_bytes(f);
    const Tensor w = Tensor::from_ints(bytes, {c.n, width}, sg::DType::u8);
    for (const std::int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
      SCOPED_TRACE("n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " m " +
                   std::to_string(m));
      const std::vector<float> x = random_floats(m * c.k, 2);
      const std::vector<float> got =
          ops::linear_q(Tensor::from_floats(x, {m, c.k}), w, f).to_floats();
      ASSERT_EQ(got.size(), static_cast<std::size_t>(m * c.n));
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t r = 0; r < c.n; ++r) {
          const std::vector<std::int64_t> row(bytes.begin() + r * width,
                                              bytes.begin() + (r + 1) * width);
          double want = 0;
          double scale = 0;
          for (std::int64_t j = 0; j < c.k; ++j) {
            const double p = x[static_cast<std::size_t>(i * c.k + j)] * value(f, row, j);
            want += p;
            scale += std::abs(p);
          }
          EXPECT_NEAR(got[static_cast<std::size_t>(i * c.n + r)], want, 1e-6 * scale + 1e-7)
              << "row " << i << " output " << r;
        }
      }
    }
  }
}

TEST_P(QuantLinear, vector_and_portable_paths_agree_and_rows_do_not_depend_on_their_batch) {
  const ops::QuantFormat f = GetParam();
  const auto kf = static_cast<quant::Format>(f);
  const std::int64_t k = 256;
  const std::vector<std::int64_t> wide = random_blocks(f, 1, k, 3);
  std::vector<std::uint8_t> row(wide.begin(), wide.end());
  const std::vector<float> x = random_floats(4 * k, 4);
  const float* xs[4] = {x.data(), x.data() + k, x.data() + 2 * k, x.data() + 3 * k};
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
    EXPECT_NEAR(portable[r], four[r], 1e-5F * (1 + std::abs(four[r])));
  }
  // Through the operator: rows alone and in batches of 2, 3 and 7, and one
  // or two compute threads, bitwise alike.
  const std::int64_t n = 300;
  const std::vector<std::int64_t> bytes = random_blocks(f, n, k, 5);
  const Tensor w = Tensor::from_ints(bytes, {n, k / 32 * ops::quant_block_bytes(f)}, sg::DType::u8);
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

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// The vector path's widened blocks (Q4_0 through its table, Note [Q4_0
// through a table]) are bitwise the dequantizer's d * q, for every byte
// value and many scales, subnormal ones included.
TEST_P(QuantLinear, widened_blocks_are_the_dequantizers_values_bitwise) {
  const auto kf = static_cast<quant::Format>(GetParam());
  const std::int64_t bb = quant::block_bytes(kf);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4096; ++trial) {
    std::vector<std::uint8_t> block(static_cast<std::size_t>(bb));
    const auto d =
        static_cast<std::uint16_t>(trial < 1024 ? trial : (rng() & 0x7BFF) | (rng() & 0x8000));
    block[0] = d & 0xFF;
    block[1] = d >> 8;
    for (std::int64_t j = 2; j < bb; ++j)
      block[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>((trial + j * 37) ^ rng());
    float want[32];
    quant::dequantize_block(kf, block.data(), want);
    float got[32];
#if defined(__AVX512F__)
    __m512 lo;
    __m512 hi;
    quant::widen_block(kf, block.data(), lo, hi);
    _mm512_storeu_ps(got, lo);
    _mm512_storeu_ps(got + 16, hi);
#else  // Note [Quantized blocks in eight lanes]
    __m256 v[4];
    quant::widen_block(kf, block.data(), v);
    for (std::ptrdiff_t i = 0; i < 4; ++i) _mm256_storeu_ps(got + 8 * i, v[i]);
#endif
    ASSERT_EQ(std::memcmp(got, want, sizeof got), 0)
        << "trial " << trial << ", scale 0x" << std::hex << d;
  }
}
#endif

TEST_P(QuantLinear, strided_and_batched_inputs_give_the_same_values) {
  const ops::QuantFormat f = GetParam();
  const std::int64_t n = 24;
  const std::int64_t k = 64;
  const std::vector<std::int64_t> bytes = random_blocks(f, n, k, 7);
  const Tensor w = Tensor::from_ints(bytes, {n, k / 32 * ops::quant_block_bytes(f)}, sg::DType::u8);
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
