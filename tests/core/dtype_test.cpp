// Element types and the f16 / bf16 conversions (IEEE round-to-nearest-even).
#include "sinkgraph/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace {

using sinkgraph::bf16_to_f32;
using sinkgraph::DType;
using sinkgraph::f16_to_f32;
using sinkgraph::f32_to_bf16;
using sinkgraph::f32_to_f16;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
bool is_f16_nan(std::uint16_t h) { return (h & 0x7C00U) == 0x7C00U && (h & 0x3FFU) != 0; }
bool is_bf16_nan(std::uint16_t b) { return (b & 0x7F80U) == 0x7F80U && (b & 0x7FU) != 0; }

TEST(core_dtype, NamesParseAndSizes) {
  const DType all[] = {DType::f32, DType::f16,     DType::bf16, DType::i32,
                       DType::i64, DType::boolean, DType::u8};
  const char* names[] = {"f32", "f16", "bf16", "i32", "i64", "bool", "u8"};
  const std::size_t sizes[] = {4, 2, 2, 4, 8, 1, 1};
  static_assert(std::size(all) == sinkgraph::kNumDTypes);
  for (int i = 0; i < sinkgraph::kNumDTypes; ++i) {
    EXPECT_EQ(sinkgraph::dtype_name(all[i]), names[i]);
    EXPECT_EQ(sinkgraph::dtype_size(all[i]), sizes[i]) << names[i];
    const auto parsed = sinkgraph::parse_dtype(names[i]);
    ASSERT_TRUE(parsed.has_value()) << names[i];
    EXPECT_EQ(*parsed, all[i]);
  }
  EXPECT_FALSE(sinkgraph::parse_dtype("float").has_value());
  EXPECT_FALSE(sinkgraph::parse_dtype("").has_value());
  EXPECT_FALSE(sinkgraph::parse_dtype("F32").has_value());
  EXPECT_FALSE(sinkgraph::parse_dtype("f32 ").has_value());
  EXPECT_TRUE(sinkgraph::is_floating(DType::bf16));
  EXPECT_FALSE(sinkgraph::is_floating(DType::i32));
  EXPECT_TRUE(sinkgraph::is_integral(DType::i64));
  EXPECT_FALSE(sinkgraph::is_integral(DType::boolean));
  EXPECT_FALSE(sinkgraph::is_integral(DType::u8));  // raw bytes, not numbers to compute on
  EXPECT_FALSE(sinkgraph::is_floating(DType::u8));
}

// ---- f16 ----------------------------------------------------------------------

TEST(core_dtype, F16ExactValues) {
  EXPECT_EQ(f32_to_f16(1.0F), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0F), 0xC000);
  EXPECT_EQ(f32_to_f16(0.5F), 0x3800);
  EXPECT_EQ(f32_to_f16(65504.0F), 0x7BFF);  // the largest finite half
  EXPECT_EQ(f32_to_f16(0.0F), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0F, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0F);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0F);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0F);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125F);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0F, -14));
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
}

TEST(core_dtype, F16RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 0x3C00 (even) and 0x3C01: down to even.
  EXPECT_EQ(f32_to_f16(1.0F + std::ldexp(1.0F, -11)), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 0x3C01 and 0x3C02 (even): up to even.
  EXPECT_EQ(f32_to_f16(1.0F + 3 * std::ldexp(1.0F, -11)), 0x3C02);
  // Just above / below a tie rounds to the nearer neighbour.
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0F + std::ldexp(1.0F, -11), 2.0F)), 0x3C01);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0F + 3 * std::ldexp(1.0F, -11), 0.0F)), 0x3C01);
  // Negative values mirror positive ones.
  EXPECT_EQ(f32_to_f16(-(1.0F + std::ldexp(1.0F, -11))), 0xBC00);
  EXPECT_EQ(f32_to_f16(-(1.0F + 3 * std::ldexp(1.0F, -11))), 0xBC02);
  // A carry out of the mantissa bumps the exponent: 2 - 2^-12 rounds to 2.
  EXPECT_EQ(f32_to_f16(2.0F - std::ldexp(1.0F, -12)), 0x4000);
}

TEST(core_dtype, F16Subnormals) {
  const float smallest = std::ldexp(1.0F, -24);  // the smallest subnormal half
  EXPECT_EQ(f32_to_f16(smallest), 0x0001);
  EXPECT_EQ(f16_to_f32(0x0001), smallest);
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * smallest);  // the largest subnormal
  EXPECT_EQ(f32_to_f16(1023 * smallest), 0x03FF);
  EXPECT_EQ(f16_to_f32(0x0200), 512 * smallest);
  // Half of the smallest subnormal is a tie between 0 (even) and 1: rounds to 0.
  EXPECT_EQ(f32_to_f16(smallest / 2), 0x0000);
  EXPECT_EQ(f32_to_f16(-smallest / 2), 0x8000);
  EXPECT_EQ(f32_to_f16(std::nextafter(smallest / 2, 1.0F)), 0x0001);
  EXPECT_EQ(f32_to_f16(smallest / 4), 0x0000);
  // 1.5 and 2.5 times the smallest: ties to even (2 both times).
  EXPECT_EQ(f32_to_f16(1.5F * smallest), 0x0002);
  EXPECT_EQ(f32_to_f16(2.5F * smallest), 0x0002);
  EXPECT_EQ(f32_to_f16(3.5F * smallest), 0x0004);
  // Rounding the largest subnormal up reaches the smallest normal.
  EXPECT_EQ(f32_to_f16(1023.5F * smallest), 0x0400);
  EXPECT_EQ(f32_to_f16(-smallest), 0x8001);
  // f32 subnormals are far below the half range.
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(core_dtype, F16OverflowInfinityNanAndSignedZero) {
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0F, 0.0F)), 0x7BFF);  // below the tie: 65504
  EXPECT_EQ(f32_to_f16(65520.0F), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(-65520.0F), 0xFC00);
  EXPECT_EQ(f32_to_f16(1e10F), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);

  EXPECT_TRUE(is_f16_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(f32_to_f16(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0x7F800001U))));  // payload only in low bits
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0xFF800001U))));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xFFFF)));

  EXPECT_EQ(f32_to_f16(-0.0F), 0x8000);
  const float neg_zero = f16_to_f32(0x8000);
  EXPECT_EQ(neg_zero, 0.0F);
  EXPECT_TRUE(std::signbit(neg_zero));
  EXPECT_FALSE(std::signbit(f16_to_f32(0x0000)));
}

TEST(core_dtype, F16RoundTripsEveryNonNanBitPattern) {
  int checked = 0;
  for (std::uint32_t h = 0; h <= 0xFFFFU; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if (is_f16_nan(bits)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(bits)));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << std::hex << "0x" << h;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);
}

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
// Against the compiler's own (correctly rounded) conversion, on a sample of
// f32 bit patterns spread over the whole range.
TEST(core_dtype, F16MatchesTheCompilersConversion) {
  for (std::uint64_t x = 0; x <= 0xFFFFFFFFULL; x += 4093) {
    const float f = from_bits(static_cast<std::uint32_t>(x));
    if (std::isnan(f)) continue;
    const auto expected = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(f32_to_f16(f), expected) << std::hex << "f32 bits 0x" << x;
  }
}
#endif

// ---- bf16 ---------------------------------------------------------------------

TEST(core_dtype, Bf16ExactAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0F), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0F), 0xC000);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0F);
  EXPECT_EQ(bf16_to_f32(0xC000), -2.0F);
  EXPECT_EQ(bits_of(bf16_to_f32(0x1234)), 0x12340000U);
  // Ties to even in both directions.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000U)), 0x3F80);  // tie, down to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000U)), 0x3F82);  // tie, up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001U)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F817FFFU)), 0x3F81);  // below the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0xBF808000U)), 0xBF80);
  EXPECT_EQ(f32_to_bf16(from_bits(0xBF818000U)), 0xBF82);
  // Carry into the exponent.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3FFFFFFFU)), 0x4000);
}

TEST(core_dtype, Bf16SubnormalsOverflowNanAndSignedZero) {
  EXPECT_EQ(f32_to_bf16(from_bits(0x00010000U)), 0x0001);  // the smallest bf16 subnormal
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000U)), 0x0000);  // half of it: tie to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008001U)), 0x0001);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000U)), 0x0002);  // tie, up to even
  EXPECT_EQ(bf16_to_f32(0x0001), from_bits(0x00010000U));

  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7F7FFFU)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);

  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0x7F800001U))));  // would round to inf
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0xFFFFFFFFU))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));

  EXPECT_EQ(f32_to_bf16(-0.0F), 0x8000);
  EXPECT_TRUE(std::signbit(bf16_to_f32(0x8000)));
}

TEST(core_dtype, Bf16RoundTripsEveryNonNanBitPattern) {
  for (std::uint32_t b = 0; b <= 0xFFFFU; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    if (is_bf16_nan(bits)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(bits)));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(bits)), bits) << std::hex << "0x" << b;
  }
}

}  // namespace
