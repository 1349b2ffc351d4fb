#pragma once
// Deterministic inputs for the benchmarks: n floats in [-scale/2, scale/2)
// (or n bytes) from a linear congruential generator, the same on every run
// and machine.
#include <cstdint>
#include <vector>

namespace sgbench {

// The generator's next state.
inline unsigned noise_step(unsigned s) { return s * 1664525U + 1013904223U; }

inline std::vector<float> noise(std::int64_t n, unsigned seed, float scale = 1.0F) {
  std::vector<float> v(static_cast<std::size_t>(n));
  unsigned s = seed;
  for (float& x : v) {
    s = noise_step(s);
    x = (static_cast<float>(s >> 8) / static_cast<float>(1U << 24) - 0.5F) * scale;
  }
  return v;
}

// n bytes from the same generator (its state's top byte per step): a
// quantized weight's blocks, without the floats' four bytes each.
inline std::vector<std::uint8_t> noise_bytes(std::int64_t n, unsigned seed) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  unsigned s = seed;
  for (std::uint8_t& b : v) {
    s = noise_step(s);
    b = static_cast<std::uint8_t>(s >> 24);
  }
  return v;
}

}  // namespace sgbench
