#!/usr/bin/env python3
"""Decode speed against the compute thread count (docs/performance.md).

Runs `sinkgraph generate --stats --threads T` for every model, mode and
thread count, interleaved round by round (so drift in the machine's speed hits
every configuration alike), and `bench_bandwidth` for the read-bandwidth
floor at each thread count: the weight bytes one decode step reads divided by
the bandwidth. Writes results.json (every run), table.md (medians, spread,
ratios) and threads.svg (the plot) into --out.

  python3 bench/threads.py --model stories=../shared/models/stories260K/stories260K.bin \
      --model dim512=/tmp/m512.bin --threads 1,2 --rounds 3 --out build/release/bench-threads

Uses only the standard library. Measure on a quiet machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = ["eager", "reduce-overhead", "max-autotune"]


def weight_bytes(path):
    """The checkpoint's size on disk: its weights, plus a header of a few KiB."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
                   if f.endswith(".safetensors") or f.endswith(".bin"))
    return os.path.getsize(path)


def run_generate(sinkgraph, model, mode, threads, steps):
    out = subprocess.run(
        [sinkgraph, "generate", "--model", model, "--mode", mode, "--threads", str(threads),
         "--steps", str(steps), "--stats"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bandwidth(tool, threads, reps, out_dir):
    path = os.path.join(out_dir, "bandwidth.json")
    subprocess.run([tool, "--threads", ",".join(map(str, threads)), "--reps", str(reps),
                    "--json", path], check=True, capture_output=True)
    with open(path) as f:
        data = json.load(f)
    return {int(r["threads"]): r["median_gb_per_s"] for r in data["results"]}


def svg_plot(models, threads, table, floors, path):
    """Grouped bars: per model, per mode, one bar per thread count; the floor
    at each thread count as a tick across the model's group. Tokens/s are
    scaled per model (each group has its own axis, labelled)."""
    bar_w, gap, group_gap, height, top, left = 14, 4, 40, 220, 40, 20
    colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"]
    groups = []
    x = left
    for m in models:
        width = len(MODES) * (len(threads) * bar_w + gap) + gap
        groups.append((m, x, width))
        x += width + group_gap
    total_w = max(x + 160, 780)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height + top + 70}"'
             ' font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="16" font-size="13">decode tokens/s by compute threads '
             '(bars: median; black tick: read-bandwidth floor at that thread count)</text>']
    for m, gx, gw in groups:
        peak = max([table[(m, mode, t)]["median"] for mode in MODES for t in threads] +
                   [floors[(m, t)] for t in threads if floors.get((m, t))])
        scale = height / peak if peak > 0 else 0
        base = top + height
        bx = gx + gap
        for mode in MODES:
            for i, t in enumerate(threads):
                v = table[(m, mode, t)]["median"]
                h = v * scale
                parts.append(f'<rect x="{bx}" y="{base - h:.1f}" width="{bar_w - 1}" height="{h:.1f}"'
                             f' fill="{colors[i % len(colors)]}"><title>{m} {mode} {t} threads: '
                             f'{v:.1f} tokens/s</title></rect>')
                floor = floors.get((m, t))
                if floor:
                    fy = base - floor * scale
                    parts.append(f'<line x1="{bx}" x2="{bx + bar_w - 1}" y1="{fy:.1f}" y2="{fy:.1f}"'
                                 ' stroke="black" stroke-width="2"/>')
                bx += bar_w
            parts.append(f'<text x="{bx - len(threads) * bar_w / 2:.1f}" y="{base + 12}" '
                         f'text-anchor="middle" font-size="9">{mode.replace("reduce-overhead", "r-o").replace("max-autotune", "m-a")}</text>')
            bx += gap
        parts.append(f'<line x1="{gx}" x2="{gx + gw}" y1="{base}" y2="{base}" stroke="#999"/>')
        parts.append(f'<text x="{gx + gw / 2:.1f}" y="{base + 30}" text-anchor="middle">{m}</text>')
        parts.append(f'<text x="{gx + gw / 2:.1f}" y="{base + 44}" text-anchor="middle" '
                     f'font-size="9">axis top = {peak:.1f} tokens/s</text>')
    lx = total_w - 150
    for i, t in enumerate(threads):
        parts.append(f'<rect x="{lx}" y="{top + 16 * i}" width="10" height="10" '
                     f'fill="{colors[i % len(colors)]}"/>')
        parts.append(f'<text x="{lx + 14}" y="{top + 16 * i + 9}">{t} thread{"s" if t > 1 else ""}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sinkgraph", default="build/release/tools/sinkgraph")
    p.add_argument("--bandwidth", default="build/release/bench/bench_bandwidth")
    p.add_argument("--model", action="append", required=True, metavar="NAME=PATH[:STEPS]",
                   help="a model; STEPS tokens per run (default 64)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bandwidth-reps", type=int, default=7)
    p.add_argument("--out", default="build/release/bench-threads")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    models, paths, steps = [], {}, {}
    for spec in a.model:
        name, _, rest = spec.partition("=")
        path, _, n = rest.partition(":")
        models.append(name)
        paths[name] = path
        steps[name] = int(n) if n else 64
    os.makedirs(a.out, exist_ok=True)

    runs = []
    for r in range(a.rounds):
        for m in models:
            for mode in MODES:
                for t in threads:
                    s = run_generate(a.sinkgraph, paths[m], mode, t, steps[m])
                    runs.append({"round": r, "model": m, "mode": mode, "threads": t,
                                 "decode_tokens_per_s": s["decode_tokens_per_s"],
                                 "threads_reported": s["threads"]})
                    print(f"round {r} {m} {mode} {t} threads: "
                          f"{s['decode_tokens_per_s']:.2f} tokens/s", file=sys.stderr)
    gbps = bandwidth(a.bandwidth, threads, a.bandwidth_reps, a.out)

    table = {}
    for m in models:
        for mode in MODES:
            for t in threads:
                v = [x["decode_tokens_per_s"] for x in runs
                     if x["model"] == m and x["mode"] == mode and x["threads"] == t]
                table[(m, mode, t)] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    floors = {(m, t): gbps[t] * 1e9 / weight_bytes(paths[m]) for m in models for t in threads}

    lines = ["| model | mode | " + " | ".join(f"{t} thr tokens/s (min–max)" for t in threads) +
             f" | {threads[-1]} ÷ {threads[0]} | " +
             " | ".join(f"÷ floor at {t}" for t in threads) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in threads) + " | ---: | " +
             " | ".join("---:" for _ in threads) + " |"]
    for m in models:
        for mode in MODES:
            cells = [f"{table[(m, mode, t)]['median']:.1f} ({table[(m, mode, t)]['min']:.1f}–"
                     f"{table[(m, mode, t)]['max']:.1f})" for t in threads]
            ratio = table[(m, mode, threads[-1])]["median"] / table[(m, mode, threads[0])]["median"]
            fl = [f"{table[(m, mode, t)]['median'] / floors[(m, t)]:.2f}" for t in threads]
            lines.append(f"| {m} | {mode} | " + " | ".join(cells) + f" | {ratio:.2f}× | " +
                         " | ".join(fl) + " |")
    lines.append("")
    lines.append("Read bandwidth (median GB/s): " +
                 ", ".join(f"{t} thread{'s' if t > 1 else ''} {gbps[t]:.1f}" for t in threads) +
                 "; floor = bandwidth ÷ checkpoint bytes: " +
                 "; ".join(f"{m} " + ", ".join(f"{floors[(m, t)]:.1f}" for t in threads)
                           for m in models) + " tokens/s.")
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"runs": runs, "bandwidth_gbps": gbps,
                   "weight_bytes": {m: weight_bytes(paths[m]) for m in models}}, f, indent=1)
    svg_plot(models, threads, table, floors, os.path.join(a.out, "threads.svg"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
