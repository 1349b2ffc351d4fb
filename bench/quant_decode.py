#!/usr/bin/env python3
"""Decode tokens/s with f32, Q8_0 and Q4_0 weights, interleaved (docs/performance.md,
"Quantized weights").

Each round runs `sinkgraph generate --stats` once per (thread count, weight
type): f32 as the checkpoint holds it, then `--quantize q8_0` and `--quantize
q4_0` (the same blocks a GGUF file of that type holds). Prints, per thread
count, each type's median decode tokens/s (min-max over rounds) and its ratio
to f32 within the same rounds (median, min-max).

  python3 bench/quant_decode.py --model /tmp/m11 --steps 32 --rounds 3 --threads 1,2

Uses only the standard library. Measure on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess

TYPES = ["f32", "q8_0", "q4_0"]


def run(cli, model, threads, steps, qtype):
    args = [cli, "generate", "--model", model, "--steps", str(steps), "--threads", str(threads),
            "--stats"]
    if qtype != "f32":
        args += ["--quantize", qtype]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["decode_tokens_per_s"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--cli", default=os.path.join(here, "..", "build", "release", "tools",
                                                 "sinkgraph"))
    p.add_argument("--model", required=True)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    tps = {(t, q): [] for t in threads for q in TYPES}
    for r in range(a.rounds):
        for t in threads:
            for q in TYPES:
                tps[(t, q)].append(run(a.cli, a.model, t, a.steps, q))
        print(f"round {r + 1}: " + ", ".join(f"{t}t {q} {tps[(t, q)][-1]:.2f}"
                                             for t in threads for q in TYPES), flush=True)
    print(f"\n{a.model}, {a.steps} steps, {a.rounds} rounds\n")
    print("| threads | type | tokens/s (median, min-max) | ÷ f32 (median, min-max) |")
    print("| --- | --- | --- | --- |")
    for t in threads:
        for q in TYPES:
            v = tps[(t, q)]
            ratios = [x / f for x, f in zip(v, tps[(t, "f32")])]
            print(f"| {t} | {q} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | "
                  f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
