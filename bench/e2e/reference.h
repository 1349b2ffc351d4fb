#pragma once
// ReferenceLlama: a plain, hand-written C++ forward pass of sinkgraph's Llama
// model (llama2.c's run.c style: straight-line loops over float arrays, one
// thread, no runtime). bench/e2e compares sinkgraph's modes against it as the
// zero-overhead reference; it is built with -O3 -march=native -ffast-math
// (bench/CMakeLists.txt). forward() uses no BLAS; forward_batched() (bench
// batch's reference) does each product of a step as one cblas_sgemm over all
// rows, so each weight is read once per step for every sequence.
//
// Semantics match src/models/llama.cpp exactly: RMSNorm with weight and
// norm_eps, grouped-query attention, RoPE (interleaved or half) with
// rope_theta and freq = 1 / theta^(2i/D) in f32, SwiGLU, shared or separate
// classifier. Only the summation order may differ.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sinkgraph/llama.h"

namespace sinkgraph::e2e {

class ReferenceLlama {
 public:
  // Copies the weights out of `model` into plain float vectors (this is the
  // only place sinkgraph's runtime is used).
  explicit ReferenceLlama(const sinkgraph::models::LlamaModel& model);

  // Runs one token at position `pos` (llama2.c's forward), appending its K/V
  // to the cache; returns the logits [vocab], valid until the next call.
  // Throws std::out_of_range for a token outside the vocabulary or a position
  // outside [0, max_seq_len).
  std::span<const float> forward(std::int64_t token, std::int64_t pos);

  // Runs one token for each of tokens.size() sequences: row r is token
  // tokens[r] at position pos[r] of the sequence in KV slot slots[r] (a
  // cache of its own, apart from forward()'s), appending its K/V there.
  // Returns the logits [rows, vocab] row-major, valid until the next call.
  // Slots are created on first use. Throws std::out_of_range as forward(),
  // and std::invalid_argument for spans of different lengths or two rows in
  // one slot.
  std::span<const float> forward_batched(std::span<const std::int64_t> tokens,
                                         std::span<const std::int64_t> pos,
                                         std::span<const std::int64_t> slots);

  // Zeroes the KV caches (forward()'s and every slot's).
  void reset();

  [[nodiscard]] const models::LlamaConfig& config() const { return config_; }

 private:
  struct Layer {
    std::vector<float> attention_norm;  // [dim]
    std::vector<float> wq, wk, wv, wo;  // [dim, dim], [kv_dim, dim], [kv_dim, dim], [dim, dim]
    std::vector<float> ffn_norm;        // [dim]
    std::vector<float> w1, w2, w3;      // [hidden, dim], [dim, hidden], [hidden, dim]
  };

  models::LlamaConfig config_;
  std::vector<float> tok_embeddings_;  // [vocab, dim]
  std::vector<Layer> layers_;
  std::vector<float> norm_;    // [dim]
  std::vector<float> output_;  // [vocab, dim]; empty when shared with the embedding
  const float* classifier_ = nullptr;

  // Activations (run.c's RunState).
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, k_, v_, att_, logits_;
  std::vector<float> rope_cos_, rope_sin_;  // [head_size / 2] for the current position
  std::vector<float> key_cache_;            // [n_layers, max_seq_len, kv_dim]
  std::vector<float> value_cache_;          // [n_layers, max_seq_len, kv_dim]

  // forward_batched()'s activations ([rows, width] each) and slot caches
  // ([slots, n_layers, max_seq_len, kv_dim] each).
  struct Batch {
    std::vector<float> x, xb, xb2, hb, hb2, q, k, v, logits;
    std::vector<float> key_cache, value_cache;
    std::size_t slots = 0;
  } batch_;
};

}  // namespace sinkgraph::e2e
