#pragma once
// The random models the end-to-end benchmarks decode (bench_e2e, bench_batch):
// a tiny one for smoke runs, else make-model's dim-512 shape (--dim 512
// --layers 8 --heads 8 --kv-heads 8 --hidden 1376 --vocab 32000).
#include "sinkgraph/llama.h"

namespace sinkgraph::e2e {

inline models::LlamaConfig random_config(bool tiny) {
  models::LlamaConfig rc;
  if (tiny) {
    rc.dim = 64;
    rc.hidden_dim = 160;
    rc.n_layers = 2;
    rc.n_heads = 4;
    rc.n_kv_heads = 2;
    rc.vocab_size = 256;
    rc.max_seq_len = 64;
  } else {
    rc.dim = 512;
    rc.hidden_dim = 1376;
    rc.n_layers = 8;
    rc.n_heads = 8;
    rc.n_kv_heads = 8;
    rc.vocab_size = 32000;
    rc.max_seq_len = 512;
  }
  return rc;
}

}  // namespace sinkgraph::e2e
