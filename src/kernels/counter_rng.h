#pragma once
// Note [Counter-based sampling]
// Random draws for sampling on the device. A stateful generator would need
// its state advanced by every replay of a captured graph, and a graph's
// kernels cannot own state. Instead a draw is a pure function of (seed,
// offset, row): the caller advances `offset` (the position being sampled)
// and a replay patches it like any updatable scalar. This is how PyTorch
// keeps CUDA graphs random (philox seed + offset); here the mixing function
// is SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014), which passes BigCrush as a counter hash.
#include <cstdint>

namespace sinkgraph::kernels {

inline std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from 53 random bits, one per (seed, offset, row).
inline double counter_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t row) {
  const std::uint64_t bits = splitmix64(splitmix64(seed + splitmix64(offset)) + row);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace sinkgraph::kernels
