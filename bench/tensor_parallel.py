#!/usr/bin/env python3
"""Tensor-parallel decode against one process (docs/performance.md, "Tensor parallelism").

For every mode, runs `sinkgraph generate --stats` as one process (N = 1) and
as `mpirun -np 2 sinkgraph generate --tensor-parallel 2` with the classifier
split by vocabulary and replicated, one compute thread per rank, interleaved
round by round (drift in the machine's speed hits every column alike). Then
runs `bench_tp_collectives` under mpirun -np 2: a token's collectives alone.
Each round also runs `bench_bandwidth` at 1 and 2 threads: on a shared VM
the second core's memory bandwidth comes and goes, and N = 2 can only gain
what it adds, so the table lists each round's ratios side by side.
Writes results.json (every run) and table.md (medians, min-max, ratios with
their spread over rounds) into --out, and prints the table.

  /usr/bin/python3 bench/tensor_parallel.py --model /tmp/m512.bin --rounds 5 \
      --out build/release/bench-tp

Uses only the standard library. Measure on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess

MODES = ["eager", "reduce-overhead", "max-autotune"]
COLUMNS = [("N=1", 1, None), ("N=2 vocab", 2, "vocab"), ("N=2 replicated", 2, "replicated")]


def mpi_env():
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "SINKGRAPH_NUM_THREADS": "1"})
    return env


def run(args, column, mode):
    _, n, classifier = column
    cmd = [args.sinkgraph, "generate", "--model", args.model, "--mode", mode,
           "--steps", str(args.steps), "--stats"]
    if n > 1:
        # One core per rank: its host thread, stream worker and MPI calls.
        cmd = [args.mpiexec, "-np", str(n), "--bind-to", "core"] + cmd + [
            "--tensor-parallel", str(n), "--tp-classifier", classifier]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=mpi_env()).stdout
    return json.loads(out.strip().splitlines()[-1])


def spread(values, digits=1):
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--sinkgraph", default="build/release/tools/sinkgraph")
    p.add_argument("--collectives", default="build/release/bench/bench_tp_collectives")
    p.add_argument("--bandwidth", default="build/release/bench/bench_bandwidth")
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="build/release/bench-tp")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    runs = {(c[0], m): [] for c in COLUMNS for m in MODES}
    bandwidth = []  # per round: (1 thread, 2 threads) GB/s
    for _ in range(args.rounds):
        bw_json = os.path.join(args.out, "bandwidth.json")
        subprocess.run([args.bandwidth, "--bytes", str(256 << 20), "--reps", "3",
                        "--json", bw_json], check=True, capture_output=True)
        with open(bw_json) as f:
            bw = {r["threads"]: r["median_gb_per_s"] for r in json.load(f)["results"]}
        bandwidth.append((bw[1], bw[2]))
        for mode in MODES:
            for column in COLUMNS:
                stats = run(args, column, mode)
                runs[(column[0], mode)].append(stats)
    tps = {k: [s["decode_tokens_per_s"] for s in v] for k, v in runs.items()}

    lines = [f"model {args.model}, {args.steps} steps, {args.rounds} interleaved rounds, "
             "one compute thread per rank; decode tokens/s, median (min-max)", "",
             "| mode | " + " | ".join(c[0] for c in COLUMNS) +
             " | N=2 vocab / N=1 | N=2 replicated / N=1 |",
             "|---|" + "---|" * (len(COLUMNS) + 2)]
    for mode in MODES:
        one = tps[("N=1", mode)]
        ratio = lambda col: [a / b for a, b in zip(tps[(col, mode)], one)]
        lines.append(f"| {mode} | " + " | ".join(spread(tps[(c[0], mode)]) for c in COLUMNS) +
                     f" | {spread(ratio('N=2 vocab'), 2)} | {spread(ratio('N=2 replicated'), 2)} |")
    lines += ["", "graph / eager (per round): " + ", ".join(
        f"{c[0]} reduce-overhead {spread([a / b for a, b in zip(tps[(c[0], 'reduce-overhead')], tps[(c[0], 'eager')])], 2)}"
        for c in COLUMNS)]
    lines += ["", "per round: read bandwidth 1 thread / 2 threads (GB/s), their ratio, and "
              "N=2 vocab / N=1 in reduce-overhead", ""]
    ro_one = tps[("N=1", "reduce-overhead")]
    ro_two = tps[("N=2 vocab", "reduce-overhead")]
    for i, (one, two) in enumerate(bandwidth):
        lines.append(f"- round {i + 1}: {one:.1f} / {two:.1f} GB/s ({two / one:.2f}x); "
                     f"N=2 / N=1 {ro_two[i] / ro_one[i]:.2f}x")
    wb = {c[0]: runs[(c[0], "reduce-overhead")][0]["weight_bytes"] for c in COLUMNS}
    lines += ["", "weight_bytes per process: " + ", ".join(f"{k} {v}" for k, v in wb.items())]

    coll = subprocess.run([args.mpiexec, "-np", "2", "--bind-to", "core", args.collectives],
                          check=True, capture_output=True, text=True, env=mpi_env()).stdout
    lines += ["", "bench_tp_collectives (mpirun -np 2):", "", "```", coll.strip(), "```"]
    table = "\n".join(lines) + "\n"
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"runs": {f"{k[0]} {k[1]}": v for k, v in runs.items()},
                   "bandwidth_gb_per_s": bandwidth}, f, indent=1)


if __name__ == "__main__":
    main()
