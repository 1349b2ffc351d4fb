#pragma once
// The scalar math of every pointwise unary and binary function, in f32: one
// definition read by the separate elementwise kernels and by the fused
// elementwise program (Note [Fused elementwise programs]), so a fused chain
// is bitwise equal to the kernels it replaces.
#include <cmath>

#include "../fused_program.h"
#include "vec.h"

namespace sinkgraph::kernels::pointwise {

inline float silu(float x) { return x / (1.0F + cpu::vec::exp(-x)); }
// PyTorch's default (exact) GELU.
inline float gelu(float x) { return 0.5F * x * (1.0F + cpu::vec::erf(x * 0.70710678118654752F)); }
inline float sigmoid(float x) { return 1.0F / (1.0F + cpu::vec::exp(-x)); }
// Note [A NaN passes through relu and clamp]
// PyTorch's relu, relu6, hardsigmoid and hardswish return NaN for NaN (its
// vectorized maximum and minimum propagate it) and relu keeps -0.0's sign.
// std::fmax and std::fmin return the other operand for a NaN, so the clamps
// here are written as comparisons that fail for NaN and leave x: relu(NaN)
// was 0 and hardsigmoid(NaN) 0, silently. As selects they also vectorize,
// where fmaxf and fminf were library calls per value (a quarter of
// mobilenet_v3_small's samples in `perf`). The codegen prelude
// (src/codegen/region.cpp) spells the same.
inline float relu(float x) { return x < 0.0F ? 0.0F : x; }
inline float relu6(float x) { return x < 0.0F ? 0.0F : (x > 6.0F ? 6.0F : x); }
// PyTorch's: hardsigmoid(x) = relu6(x + 3) / 6; hardswish(x) = x * relu6(x + 3) / 6.
inline float hardsigmoid(float x) { return relu6(x + 3.0F) / 6.0F; }
inline float hardswish(float x) { return x * relu6(x + 3.0F) / 6.0F; }

inline float unary(int fn, float x) {
  switch (fn) {
    case fused::kNeg:
      return -x;
    case fused::kExp:
      return cpu::vec::exp(x);
    case fused::kSqrt:
      return std::sqrt(x);
    case fused::kRsqrt:
      return 1.0F / std::sqrt(x);
    case fused::kErf:
      return cpu::vec::erf(x);
    case fused::kRelu:
      return relu(x);
    case fused::kSilu:
      return silu(x);
    case fused::kGelu:
      return gelu(x);
    case fused::kTanh:
      return std::tanh(x);
    case fused::kSigmoid:
      return sigmoid(x);
    case fused::kHardswish:
      return hardswish(x);
    case fused::kCos:
      return std::cos(x);
    case fused::kSin:
      return std::sin(x);
    default:  // kHardsigmoid
      return hardsigmoid(x);
  }
}

inline float binary(int fn, float a, float b) {
  switch (fn) {
    case fused::kAdd:
      return a + b;
    case fused::kSub:
      return a - b;
    case fused::kMul:
      return a * b;
    default:  // kDiv
      return a / b;
  }
}

}  // namespace sinkgraph::kernels::pointwise
