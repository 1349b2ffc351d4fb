"""Benchmark: torch eager vs sinkgraph eager / reduce-overhead / max-autotune on PyTorch models.

Batch 1, one compute thread for everyone (torch.set_num_threads(1); sinkgraph's
kernels run on its stream worker). All variants of a model live in one
process and are timed in alternation: each round times `calls` calls of every
variant, the order rotating between rounds, and a variant's figure is the
median over rounds of its per-round median call time. Ratios are torch eager
time / variant time, per round, so they come with their spread (min..max over
rounds).

Usage (from the repository root, after cmake --build --preset release):
  PYTHONPATH=build/release/python /usr/bin/python3 bench/torch_models.py \
      [--rounds 7] [--calls 20] [--models tel,mha,...] [--json out.json] [--svg out.svg]

Stop other work on the machine first: figures under load flatter nobody.
"""

import argparse
import json
import statistics
import sys
import time

import torch

import sinkgraph

MODES = ["eager", "reduce-overhead", "max-autotune"]


class SelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)


def models():
    import torchvision
    from torchvision.models.vision_transformer import VisionTransformer
    return {
        "tel": ("TransformerEncoderLayer(64, 4, 128), 1x10x64",
                lambda: torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0,
                                                         batch_first=True),
                lambda: torch.randn(1, 10, 64)),
        "mha": ("MultiheadAttention(64, 4) self-attention, 1x10x64", SelfAttention,
                lambda: torch.randn(1, 10, 64)),
        "mlp": ("MLP 256-1024-256, GELU + LayerNorm, 1x256",
                lambda: torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                            torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 256)),
                lambda: torch.randn(1, 256)),
        "resnet18": ("resnet18, 1x3x224x224", lambda: torchvision.models.resnet18(),
                     lambda: torch.randn(1, 3, 224, 224)),
        "mobilenet": ("mobilenet_v3_small, 1x3x224x224",
                      lambda: torchvision.models.mobilenet_v3_small(),
                      lambda: torch.randn(1, 3, 224, 224)),
        "vit": ("VisionTransformer(224, patch 16, 4 layers, 6 heads, 384), 1x3x224x224",
                lambda: VisionTransformer(224, 16, 4, 6, 384, 1536),
                lambda: torch.randn(1, 3, 224, 224)),
    }


def time_calls(fn, x, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_model(key, label, make, make_input, rounds, calls):
    torch.manual_seed(0)
    model = make().eval()
    x = make_input()
    variants = {"torch eager": model}
    for mode in MODES:
        config = sinkgraph.CompilerConfig()
        config.mode = mode
        if mode == "max-autotune":
            config.frozen_parameter = True
        variants["sinkgraph " + mode] = sinkgraph.compile(
            model, backend=sinkgraph.get_backend(compiler_config=config))
    with torch.no_grad():
        want = model(x)
        for name, fn in variants.items():
            for _ in range(3):  # trace, capture, warm
                got = fn(x)
            torch.testing.assert_close(got, want, msg=lambda m: f"{key} {name}: {m}")
        per_round = {name: [] for name in variants}
        names = list(variants)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                per_round[name].append(time_calls(variants[name], x, calls))
    base = per_round["torch eager"]
    out = {"model": key, "label": label, "variants": {}}
    for name, ts in per_round.items():
        ratios = [b / t for b, t in zip(base, ts)]
        out["variants"][name] = {
            "median_us": statistics.median(ts) * 1e6,
            "speedup_median": statistics.median(ratios),
            "speedup_min": min(ratios),
            "speedup_max": max(ratios),
        }
    return out


def svg_chart(results, path):
    """Speedup over torch eager per model and mode, as grouped bars (a plain SVG)."""
    modes = ["sinkgraph " + m for m in MODES]
    colors = ["#8da0cb", "#66c2a5", "#fc8d62"]
    w, h, left, top, bottom = 760, 320, 60, 30, 70
    group = (w - left - 20) / max(1, len(results))
    peak = max(v["variants"][m]["speedup_max"] for v in results for m in modes)
    peak = max(peak, 1.0) * 1.1
    y = lambda s: top + (h - top - bottom) * (1 - s / peak)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18">speedup over torch eager (batch 1, one thread; '
             'bars: median, whiskers: min..max over rounds)</text>',
             f'<line x1="{left}" y1="{y(1):.1f}" x2="{w - 10}" y2="{y(1):.1f}" '
             'stroke="#999" stroke-dasharray="4"/>',
             f'<text x="{left - 30}" y="{y(1) + 4:.1f}">1.0x</text>']
    for gi, r in enumerate(results):
        x0 = left + gi * group + 8
        bw = (group - 16) / len(modes)
        for mi, m in enumerate(modes):
            v = r["variants"][m]
            bx = x0 + mi * bw
            parts.append(f'<rect x="{bx:.1f}" y="{y(v["speedup_median"]):.1f}" '
                         f'width="{bw - 2:.1f}" height="{y(0) - y(v["speedup_median"]):.1f}" '
                         f'fill="{colors[mi]}"/>')
            cx = bx + (bw - 2) / 2
            parts.append(f'<line x1="{cx:.1f}" y1="{y(v["speedup_min"]):.1f}" x2="{cx:.1f}" '
                         f'y2="{y(v["speedup_max"]):.1f}" stroke="#333"/>')
        parts.append(f'<text x="{x0:.1f}" y="{h - bottom + 16}">{r["model"]}</text>')
    for mi, m in enumerate(modes):
        parts.append(f'<rect x="{left + mi * 170}" y="{h - 28}" width="10" height="10" '
                     f'fill="{colors[mi]}"/><text x="{left + mi * 170 + 14}" y="{h - 19}">{m}'
                     '</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--models", default="tel,mha,mlp,resnet18,mobilenet,vit")
    ap.add_argument("--json")
    ap.add_argument("--svg")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    table = models()
    results = []
    for key in args.models.split(","):
        if key not in table:
            print(f"unknown model {key!r}; known: {', '.join(table)}", file=sys.stderr)
            return 2
        label, make, make_input = table[key]
        calls = args.calls if key in ("tel", "mha", "mlp") else max(3, args.calls // 4)
        r = bench_model(key, label, make, make_input, args.rounds, calls)
        results.append(r)
        print(f"\n{label}")
        print("| variant | median per call | speedup over torch eager (median, min..max) |")
        print("| --- | --- | --- |")
        for name, v in r["variants"].items():
            print(f"| {name} | {v['median_us']:.1f} µs | {v['speedup_median']:.2f}x "
                  f"({v['speedup_min']:.2f}..{v['speedup_max']:.2f}) |")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rounds": args.rounds, "results": results}, f,
                      indent=1)
    if args.svg:
        svg_chart(results, args.svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
