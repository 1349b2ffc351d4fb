#!/usr/bin/env python3
"""Greedy decode of one GGUF file by llama.cpp (llama-cpp-python), timed as
llama.cpp times itself: bench/quant_decode.py's peer column.

Runs BOS, then `--steps` greedy steps, one token per llama_decode, and prints
one JSON line: the ids, llama.cpp's own decode time per token (its perf
counters: the llama_decode calls, as llama-bench's "tg" test; no Python in
it) and the wall time of the Python loop around them.

  python bench/llama_cpp_decode.py --model m.gguf --threads 2 --steps 32

Needs only llama_cpp and numpy: it runs in the venv that holds
llama-cpp-python (requirements.txt says which version and why it is apart).
"""
import argparse
import json
import time

import llama_cpp
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--bos", type=int, default=1)
    a = p.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.steps + 8, n_batch=8, n_ubatch=8,
                          n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()

    def last_logits():  # the row llama_decode just computed, without a copy
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))

    llm.eval([a.bos])
    ids = [int(np.argmax(last_logits()))]
    llama_cpp.llama_perf_context_reset(ctx)
    start = time.perf_counter()
    for _ in range(a.steps - 1):
        llm.eval([ids[-1]])
        ids.append(int(np.argmax(last_logits())))
    wall = time.perf_counter() - start
    perf = llama_cpp.llama_perf_context(ctx)
    n = max(perf.n_eval, 1)
    print(json.dumps({"ids": ids, "n_eval": perf.n_eval,
                      "decode_tokens_per_s": 1e3 * n / perf.t_eval_ms,
                      "wall_tokens_per_s": (a.steps - 1) / wall}))


if __name__ == "__main__":
    main()
