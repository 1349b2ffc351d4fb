#!/usr/bin/env python3
"""Decode at the machine's limits, one table from one run (docs/performance.md).

For one model (the bandwidth model, e.g. the 1.1B shape) it runs `sinkgraph
generate --stats` with 1 and 2 compute threads, with batches of B prompts
decoded together (--prompts-file, --max-batch B --warmup-buckets) at the
largest thread count, and under tensor parallelism (`mpirun -np N sinkgraph
generate --tensor-parallel N`, one compute thread per rank), all interleaved
round by round; a second, smaller model can take the batch rows
(--batch-model, e.g. the built-in one, whose 16-sequence target the issue
sets). `bench_bandwidth` measures the read bandwidth at each thread count in
the same run, and each row's floor is what that bandwidth allows when a step
reads every weight once: bandwidth ÷ checkpoint bytes tokens/s per sequence,
times B for a batch. Writes table.md and results.json into --out.

  python3 bench/decode_table.py --model 1.1B=/tmp/m11:24 --batch-model builtin:64 \\
      --rounds 3 --out build/release/bench-decode

Uses only the standard library. Measure on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from threads import bandwidth  # noqa: E402  (bench/threads.py)


def generate(cmd, model, mode, threads, steps, prompts_file=None, batch=1):
    args = cmd + ["generate", "--model", model, "--mode", mode, "--threads", str(threads),
                  "--steps", str(steps), "--stats"]
    if prompts_file:
        args += ["--prompts-file", prompts_file, "--max-batch", str(batch), "--warmup-buckets"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def parse_model(spec, default_steps):
    name, _, rest = spec.partition("=")
    if not rest:
        name, rest = os.path.basename(spec.rstrip("/")).split(":")[0], spec
    path, _, n = rest.partition(":")
    return name, path, int(n) if n else default_steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sinkgraph", default="build/release/tools/sinkgraph")
    p.add_argument("--bandwidth", default="build/release/bench/bench_bandwidth")
    p.add_argument("--model", required=True, metavar="NAME=PATH[:STEPS]")
    p.add_argument("--batch-model", metavar="NAME=PATH[:STEPS]",
                   help="the model of the batch rows (default: --model)")
    p.add_argument("--mode", default="reduce-overhead")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,4,16,32")
    p.add_argument("--tp", default="2", help="tensor-parallel sizes ('' for none)")
    p.add_argument("--mpirun", default="mpirun --allow-run-as-root --bind-to none")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bandwidth-reps", type=int, default=7)
    p.add_argument("--out", default="build/release/bench-decode")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    tps = [int(t) for t in a.tp.split(",") if t]
    most = max(threads)
    name, path, steps = parse_model(a.model, 24)
    bname, bpath, bsteps = parse_model(a.batch_model, 64) if a.batch_model else (name, path, steps)
    os.makedirs(a.out, exist_ok=True)
    sg = [a.sinkgraph]

    # Rows: (label, model name, run function, floor factor (sequences), threads of the floor).
    rows = []
    for t in threads:
        rows.append((f"{name}, 1 sequence, {t} thread{'s' if t > 1 else ''}", name,
                     lambda t=t: generate(sg, path, a.mode, t, steps), 1, t))
    files = {}
    for b in batches:
        f = tempfile.NamedTemporaryFile("w", suffix=f"-{b}.txt", delete=False)
        f.write("1\n" * b)
        f.close()
        files[b] = f.name
        rows.append((f"{bname}, batch {b}, {most} threads", bname,
                     lambda b=b: generate(sg, bpath, a.mode, most, bsteps, files[b], b), b, most))
    for n in tps:
        cmd = a.mpirun.split() + ["-np", str(n), a.sinkgraph]
        rows.append((f"{name}, tensor parallel {n} ({n} ranks × 1 thread)", name,
                     lambda n=n, cmd=cmd: _tp(cmd, path, a.mode, steps, n), 1, n))

    runs = {label: [] for label, *_ in rows}
    stats_bytes = {}
    for r in range(a.rounds):
        for label, model, fn, _, _ in rows:
            s = fn()
            runs[label].append(s["decode_tokens_per_s"])
            stats_bytes.setdefault(model, s["weight_bytes"] * s.get("tp_size", 1))
            print(f"round {r} {label}: {s['decode_tokens_per_s']:.2f} tokens/s", file=sys.stderr)
    gbps = bandwidth(a.bandwidth, sorted(set(threads) | set(tps) | {most}), a.bandwidth_reps,
                     a.out)
    for f in files.values():
        os.unlink(f)

    # Bytes a step reads: the weights the process(es) hold (--stats'
    # weight_bytes, summed over ranks).
    lines = [f"Mode {a.mode}; {a.rounds} rounds; medians (min–max).", "",
             "| configuration | tokens/s | floor tokens/s | ÷ floor |",
             "| --- | ---: | ---: | ---: |"]
    table = []
    for label, model, _, seqs, t in rows:
        v = runs[label]
        floor = seqs * gbps[t] * 1e9 / stats_bytes[model]
        med = statistics.median(v)
        table.append({"configuration": label, "median": med, "min": min(v), "max": max(v),
                      "floor": floor, "runs": v})
        lines.append(f"| {label} | {med:,.1f} ({min(v):,.1f}–{max(v):,.1f}) | {floor:,.1f} | "
                     f"{med / floor:.2f} |")
    lines += ["", "Read bandwidth (median GB/s): " +
              ", ".join(f"{t} thread{'s' if t > 1 else ''} {gbps[t]:.1f}" for t in sorted(gbps)) +
              "; weight bytes per step: " +
              ", ".join(f"{m} {b / 1e6:,.1f} MB" for m, b in stats_bytes.items()) + "."]
    b1 = [x for x in table if ", batch 1," in x["configuration"]]
    for x in table:
        if b1 and ", batch " in x["configuration"] and x is not b1[0]:
            lines.append(f"- {x['configuration']}: {x['median'] / b1[0]['median']:.2f}× batch 1")
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"rows": table, "bandwidth_gbps": gbps, "weight_bytes": stats_bytes}, f,
                  indent=1)
    print("\n".join(lines))


def _tp(cmd, path, mode, steps, n):
    args = cmd + ["generate", "--model", path, "--mode", mode, "--threads", "1", "--steps",
                  str(steps), "--stats", "--tensor-parallel", str(n)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
