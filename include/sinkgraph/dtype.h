#pragma once
// Element types. Kernels compute in f32; f16 and bf16 are storage formats
// converted to and from f32 with IEEE round-to-nearest-even. u8 is raw bytes:
// quantized weights in ggml's block layouts (Note [Quantized weights] in
// include/sinkgraph/ops.h), read only by the operators made for them.
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "sinkgraph/export.h"

namespace sinkgraph {

enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, boolean, u8 };
inline constexpr int kNumDTypes = 7;

SG_API std::string_view dtype_name(DType dtype);  // "f32", "f16", ..., "bool"
SG_API std::optional<DType> parse_dtype(std::string_view name);
SG_API std::size_t dtype_size(DType dtype);
inline bool is_floating(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }
inline bool is_integral(DType d) { return d == DType::i32 || d == DType::i64; }

// Storage types for the two half formats; plain 16-bit payloads.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  std::uint32_t exp = (h >> 10) & 0x1FU;
  std::uint32_t mant = h & 0x3FFU;
  std::uint32_t bits = 0;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400U) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FFU;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000U | (mant << 13);  // inf or nan
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline std::uint16_t f32_to_f16(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000U;
  const std::uint32_t abs = x & 0x7FFFFFFFU;
  if (abs > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);   // nan
  if (abs >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);  // overflow -> inf
  if (abs < 0x38800000U) {  // result is subnormal or zero
    if (abs < 0x33000000U)
      return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7FFFFFU) | 0x800000U;
    const std::uint32_t shift =
        126 - exp;  // 14 + (112 - exp) ... = bits dropped from the 24-bit mantissa
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1U << shift) - 1U);
    const std::uint32_t halfway = 1U << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1U))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  // Normal: rebias exponent, round the 13 dropped bits to nearest even.
  std::uint32_t h = ((abs - 0x38000000U) >> 13);
  const std::uint32_t rem = abs & 0x1FFFU;
  if (rem > 0x1000U || (rem == 0x1000U && (h & 1U))) ++h;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | h);
}

inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t f32_to_bf16(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U)
    return static_cast<std::uint16_t>((x >> 16) | 0x40U);  // quiet nan
  const std::uint32_t rounding = 0x7FFFU + ((x >> 16) & 1U);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

}  // namespace sinkgraph
