#!/usr/bin/env python3
"""Decode speed at 2 compute threads against 1, in one process
(docs/performance.md, "Steady numbers").

One sinkgraph.Generator per mode, reused; each round calls it once at each
thread count (sinkgraph.set_num_threads), the pair's order alternating round
by round, and records the ratio of the two calls' decode tokens/s. Comparing
inside one process keeps the two-speed effect of a process's memory out of
the ratio (docs/performance.md). Prints the median ratio per mode with the
second-lowest and second-highest.

  PYTHONPATH=build/release/python .venv/bin/python bench/threads_in_process.py --rounds 16
"""
import argparse
import statistics

import sinkgraph


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint (default: the shipped stories260K)")
    ap.add_argument("--modes", default="eager,reduce-overhead,max-autotune")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    modes = args.modes.split(",")
    gens = {m: sinkgraph.Generator(args.model, m) for m in modes}
    for g in gens.values():
        g.generate([1], 16)  # load, capture
    ratios = {m: [] for m in modes}
    for r in range(args.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        for m in modes:
            tps = {}
            for t in order:
                sinkgraph.set_num_threads(t)
                tps[t] = gens[m].generate([1], args.tokens).stats["decode_tokens_per_s"]
            ratios[m].append(tps[2] / tps[1])
    for m in modes:
        v = sorted(ratios[m])
        lo, hi = (v[1], v[-2]) if len(v) > 3 else (v[0], v[-1])
        print(f"{m:16s} 2 threads / 1: {statistics.median(v):.3f} ({lo:.3f}-{hi:.3f}), "
              f"{len(v)} rounds")


if __name__ == "__main__":
    main()
