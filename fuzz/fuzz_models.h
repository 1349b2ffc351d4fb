#pragma once
// The tiny Llama config shared by the checkpoint fuzzers and their seed
// generator (make_seeds.cpp): small enough that a whole checkpoint is a few
// kilobytes, so libFuzzer mutates headers and sizes rather than bulk data.
#include "sinkgraph/llama.h"

namespace sinkgraph::fuzz {

inline models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.dim = 8;
  c.hidden_dim = 12;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 8;
  c.max_seq_len = 4;
  return c;
}

// config.json for tiny_config(), as the safetensors fuzzer reads it.
inline constexpr const char* kTinyConfigJson =
    R"({"dim": 8, "hidden_dim": 12, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1,
        "vocab_size": 8, "max_seq_len": 4, "norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_style": "interleaved"})";

}  // namespace sinkgraph::fuzz
