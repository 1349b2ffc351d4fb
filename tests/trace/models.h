#pragma once
// Small model functions shared by the trace and compile tests: ordinary model
// code on Tensor, SymInt and ops::, with weights held by the model object.
#include <random>
#include <vector>

#include "sinkgraph/ops.h"
#include "sinkgraph/trace.h"

namespace sgtest {

namespace sg = sinkgraph;

inline sg::Tensor random_tensor(const sg::Shape& shape, std::uint32_t seed, float scale = 0.5F) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(sg::numel(shape)));
  for (auto& x : v) x = dist(rng);
  return sg::Tensor::from_floats(v, shape);
}

// y = silu(x @ w1) @ w2, x[s0, 64].
struct Mlp {
  sg::Tensor w1 = random_tensor({64, 256}, 1);
  sg::Tensor w2 = random_tensor({256, 64}, 2);
  std::vector<sg::Tensor> operator()(std::span<const sg::Arg> args) const {
    const auto& x = std::get<sg::Tensor>(args[0]);
    return {sg::ops::matmul(sg::ops::silu(sg::ops::matmul(x, w1)), w2)};
  }
  // As PyTorch's module.named_parameters(): compile(mlp, ...) guards on them.
  [[nodiscard]] sg::NamedTensors named_parameters() const { return {{"w1", &w1}, {"w2", &w2}}; }
};

// One decode-style attention block over a KV cache: x[1, 32], 4 heads of 8,
// pos a SymInt, k/v caches [16, 4, 8] written in place at pos.
struct AttentionBlock {
  static constexpr int kDim = 32, kHeads = 4, kHead = 8, kCache = 16;
  sg::Tensor wq = random_tensor({kDim, kDim}, 3);
  sg::Tensor wk = random_tensor({kDim, kDim}, 4);
  sg::Tensor wv = random_tensor({kDim, kDim}, 5);
  sg::Tensor wo = random_tensor({kDim, kDim}, 6);
  std::vector<sg::Tensor> operator()(std::span<const sg::Arg> args) const {
    const auto& x = std::get<sg::Tensor>(args[0]);
    const auto& pos = std::get<sg::SymInt>(args[1]);
    const auto& k_cache = std::get<sg::Tensor>(args[2]);
    const auto& v_cache = std::get<sg::Tensor>(args[3]);
    const sg::SymShape heads{1, kHeads, kHead};
    const sg::Tensor q = sg::ops::rope(sg::ops::view(sg::ops::linear(x, wq), heads), pos);
    const sg::Tensor k = sg::ops::rope(sg::ops::view(sg::ops::linear(x, wk), heads), pos);
    const sg::Tensor v = sg::ops::view(sg::ops::linear(x, wv), heads);
    sg::ops::index_copy_(k_cache, pos, k);
    sg::ops::index_copy_(v_cache, pos, v);
    const sg::Tensor a = sg::ops::attention(q, k_cache, v_cache, pos + 1, 0.5);
    return {sg::ops::linear(sg::ops::view(a, {1, kDim}), wo)};
  }
};

}  // namespace sgtest
