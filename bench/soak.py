#!/usr/bin/env python3
"""Soak: long runs through the torch 2.x backend (issue 36, item 5).

Part 1, replays: an MLP (64-128-64, GELU, batch 2) compiled in reduce-overhead,
called --replays times (default 10^6) with fresh inputs, outputs dropped.
Part 2, generate: a seeded tiny transformers Llama (hidden 256, 4 layers,
vocab 8192) whose forward is compiled with backend="sinkgraph",
mode="reduce-overhead", greedy generate with a static cache of --new tokens
per call until --steps decode steps (default 10^4) have run; every
generate's ids are checked equal to the first's.

For each part, --points times over the run: the process's resident memory
(VmRSS) and the mean time per call (part 1) or per decode step (part 2) over
the calls since the previous point. Flat means: no leak per call, no growing
per-call cost (caches, lists, guards that grow with the number of calls).

  PYTHONPATH=build/release/python .venv/bin/python bench/soak.py \\
      [--replays 1000000] [--steps 10000] [--new 100] [--points 10] [--out FILE]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SINKGRAPH_NUM_THREADS", "1")


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def replays(n, points):
    import torch
    import sinkgraph
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 64)).eval()
    cfg = sinkgraph.CompilerConfig()
    cfg.mode = "reduce-overhead"
    backend = sinkgraph.get_backend(compiler_config=cfg)
    opt = torch.compile(model, backend=backend)
    xs = [torch.randn(2, 64) for _ in range(16)]
    curve = []
    with torch.no_grad():
        for x in xs:  # compile, capture, and check once
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
        every = n // points
        t0 = time.perf_counter()
        for i in range(1, n + 1):
            opt(xs[i % 16])
            if i % every == 0:
                t1 = time.perf_counter()
                curve.append({"calls": i, "rss_kib": rss_kib(),
                              "us_per_call": (t1 - t0) / every * 1e6})
                print(f"  {i:>9} replays  rss {curve[-1]['rss_kib']:>8} KiB  "
                      f"{curve[-1]['us_per_call']:6.2f} µs/call", flush=True)
                t0 = time.perf_counter()
        for x in xs:  # still right at the end
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    return {"curve": curve, "captured": c["captured"], "replayed": c["replayed"]}


def generate(steps, new, points):
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=768,
                                   num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=4, max_position_embeddings=512,
                                   bos_token_id=1, eos_token_id=2)
    with tempfile.TemporaryDirectory() as tmp:
        transformers.LlamaForCausalLM(cfg).eval().save_pretrained(tmp)
        model = transformers.LlamaForCausalLM.from_pretrained(tmp).eval()
    prompt = torch.tensor([[1, 15, 27, 300, 4000, 12, 9, 81]])
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt.shape[1] + new)
    model.forward = torch.compile(model.forward, backend="sinkgraph", mode="reduce-overhead")
    calls = -(-steps // (new - 1))  # decode steps per generate: new - 1
    every = max(1, calls // points)
    curve, first, done, t_steps = [], None, 0, 0.0
    with torch.no_grad():
        for call in range(1, calls + 1):
            cache.reset()
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=new, do_sample=False, cache=cache,
                                 pad_token_id=0, eos_token_id=None)
            t_steps += time.perf_counter() - t0
            ids = out[0].tolist()
            if first is None:
                first = ids
            elif ids != first:
                raise AssertionError(f"generate {call} gave other ids than the first")
            done += new - 1
            if call % every == 0:
                curve.append({"decode_steps": done, "rss_kib": rss_kib(),
                              "ms_per_generate": t_steps / every * 1e3})
                print(f"  {done:>9} steps  rss {curve[-1]['rss_kib']:>8} KiB  "
                      f"{curve[-1]['ms_per_generate']:7.1f} ms/generate of {new} tokens",
                      flush=True)
                t_steps = 0.0
    return {"curve": curve, "generates": calls, "new_tokens": new}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replays", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--new", type=int, default=100)
    p.add_argument("--points", type=int, default=10)
    p.add_argument("--out", default="build/soak.json")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    result = {"args": vars(args)}
    print(f"replays: {args.replays} calls of a compiled MLP (reduce-overhead)", flush=True)
    result["replays"] = replays(args.replays, args.points)
    print(f"generate: {args.steps} decode steps of a tiny Llama (reduce-overhead)", flush=True)
    result["generate"] = generate(args.steps, args.new, args.points)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
