#pragma once
// Deterministic inputs for the benchmarks: n floats in [-scale/2, scale/2)
// from a linear congruential generator, the same on every run and machine.
#include <cstdint>
#include <vector>

namespace sgbench {

inline std::vector<float> noise(std::int64_t n, unsigned seed, float scale = 1.0F) {
  std::vector<float> v(static_cast<std::size_t>(n));
  unsigned s = seed;
  for (float& x : v) {
    s = s * 1664525U + 1013904223U;
    x = (static_cast<float>(s >> 8) / static_cast<float>(1U << 24) - 0.5F) * scale;
  }
  return v;
}

}  // namespace sgbench
