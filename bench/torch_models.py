#!/usr/bin/env python3
"""Benchmark: PyTorch models under torch eager, Inductor and sinkgraph's three modes.

What it measures. For each model, at batch 1, in eval mode and under
torch.no_grad(), five variants of the same module in one process:

  torch eager                the module itself
  inductor                   torch.compile(model), torch's default backend
  sinkgraph eager            torch.compile(model, backend=sinkgraph.get_backend(
  sinkgraph reduce-overhead      compiler_config=cfg)), cfg.mode set to the mode named
  sinkgraph max-autotune         (every other option at its default)

1. Compile and warm every variant; its first call (Dynamo's trace and the
   backend's compile) is reported as its compile time. A variant that raises,
   or whose output disagrees with torch eager's (rtol 1e-3, atol 1e-4), is
   marked FAILED or MISMATCH and not timed; the run goes on.
2. Pick N per variant so that N calls take about 0.3 s (at least 3 calls).
3. R rounds (--rounds, default 7). Each round times every variant in turn,
   the order rotating from round to round, so that drift in the machine's
   speed hits all of them alike; a variant's figure for the round is the
   median of its N calls.

Reported per variant: the median over rounds of its per-round time per call
(µs), and its speed-up over torch eager, the median of the per-round ratios
(torch eager's time in the round / the variant's), with their min-max in
brackets. The JSON file (--out) holds every round's figures.

Run from the repository root, after the release build, on a quiet machine:

  PYTHONPATH=build/release/python .venv/bin/python bench/torch_models.py
  ... --models mlp,resnet18 --rounds 7 --threads 1 --out build/bench-torch-models.json
  ... --small     # 64x64 images and 3 rounds (unless --rounds): a quick check only
  ... --own-conv  # one more variant: max-autotune with oneDNN switched off

--threads T (default 1) sets torch.set_num_threads(T), which Inductor's
generated code also uses, and SINKGRAPH_NUM_THREADS=T before sinkgraph is
imported. Compile times depend on Inductor's on-disk cache (run with
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 for cold compiles).
"""

import argparse
import gc
import json
import os
import platform
import math
import statistics
import sys
import time

import torch

VARIANTS = ["torch eager", "inductor", "sinkgraph eager", "sinkgraph reduce-overhead",
            "sinkgraph max-autotune"]
BASE = "torch eager"
ROUND_SECONDS = 0.3  # the time N calls of one variant take in a round
MIN_CALLS = 3
CALIBRATE_SECONDS = 0.1  # calls timed (after the warm ones) to choose N
WARM_CALLS = 3  # calls after the first, before the check and the calibration
RTOL, ATOL = 1e-3, 1e-4


class SelfAttention(torch.nn.Module):
    """nn.MultiheadAttention called as self-attention, mha(x, x, x)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)


class GptBlock(torch.nn.Module):
    """A nanoGPT-style pre-norm block whose attention is written out (q @ k^T,
    masked_fill with a tril buffer when causal, softmax, @ v), as many
    hand-written models do: the decomposed pattern, not
    scaled_dot_product_attention."""

    def __init__(self, dim, heads, seq, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        self.register_buffer("tril", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(self.tril[:, :, :t, :t] == 0, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


def model_table(small):
    """key -> (label, make_model, make_inputs): every model the benchmark knows."""
    import torchvision
    from torchvision.models import VisionTransformer

    side = 64 if small else 224
    image = f"1x3x{side}x{side}"

    def images():
        return (torch.randn(1, 3, side, side),)

    def seq():
        return (torch.randn(1, 32, 256),)

    def vision(name):
        return (f"{name}, {image}", lambda: getattr(torchvision.models, name)(), images)

    return {
        "encoder": ("TransformerEncoderLayer(256, 4 heads, ff 1024), 1x32x256",
                    lambda: torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True),
                    seq),
        # issue 33's targets: a layer small enough that host cost is most of
        # a call, and resnet18 at 112x112
        "encoder_small": ("TransformerEncoderLayer(64, 4 heads, ff 128), 1x10x64",
                          lambda: torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
                          lambda: (torch.randn(1, 10, 64),)),
        "resnet18_112": ("resnet18, 1x3x112x112", lambda: torchvision.models.resnet18(),
                         lambda: (torch.randn(1, 3, 112, 112),)),
        "decoder": ("TransformerDecoderLayer(256, 4 heads, ff 1024), tgt and memory 1x32x256",
                    lambda: torch.nn.TransformerDecoderLayer(256, 4, 1024, batch_first=True),
                    lambda: (torch.randn(1, 32, 256), torch.randn(1, 32, 256))),
        "mha": ("MultiheadAttention(256, 4 heads) self-attention, 1x32x256",
                lambda: SelfAttention(256, 4), seq),
        "gpt_block": ("nanoGPT-style block (64, 4 heads, written-out causal attention), 1x10x64",
                      lambda: GptBlock(64, 4, 10), lambda: (torch.randn(1, 10, 64),)),
        "encoder_block": ("pre-norm encoder block (256, 4 heads, written-out attention, no "
                          "mask), 1x64x256",
                          lambda: GptBlock(256, 4, 64, causal=False),
                          lambda: (torch.randn(1, 64, 256),)),
        "mlp": ("MLP LayerNorm(512), Linear 512-2048, GELU, Linear 2048-512, 1x512",
                lambda: torch.nn.Sequential(torch.nn.LayerNorm(512), torch.nn.Linear(512, 2048),
                                            torch.nn.GELU(), torch.nn.Linear(2048, 512)),
                lambda: (torch.randn(1, 512),)),
        "resnet18": vision("resnet18"),
        "mobilenet_v3_small": vision("mobilenet_v3_small"),
        "efficientnet_b0": vision("efficientnet_b0"),
        "convnext_tiny": vision("convnext_tiny"),
        "vit": (f"VisionTransformer(patch 16, 4 layers, 4 heads, 256, mlp 1024), {image}",
                lambda: VisionTransformer(image_size=side, patch_size=16, num_layers=4,
                                          num_heads=4, hidden_dim=256, mlp_dim=1024),
                images),
    }


OWN_KERNELS = "max-autotune, own conv"


def make_variants(model, sinkgraph, own_kernels=False):
    """name -> (callable, sinkgraph Backend or None). torch.compile is lazy: the
    compile happens on the first call. With own_kernels, one more variant: the
    max-autotune module itself, called with sinkgraph.set_use_onednn(False)
    (the same captured graphs, convolutions on sinkgraph's own kernels)."""
    out = {BASE: (model, None), "inductor": (torch.compile(model), None)}
    for mode in ("eager", "reduce-overhead", "max-autotune"):
        cfg = sinkgraph.CompilerConfig()
        cfg.mode = mode
        backend = sinkgraph.get_backend(compiler_config=cfg)
        out["sinkgraph " + mode] = (torch.compile(model, backend=backend), backend)
    if own_kernels:
        compiled, backend = out["sinkgraph max-autotune"]

        def without_onednn(*args):
            sinkgraph.set_use_onednn(False)
            try:
                return compiled(*args)
            finally:
                sinkgraph.set_use_onednn(True)

        out[OWN_KERNELS] = (without_onednn, backend)
    return out


def disagreement(got, want):
    """None when got matches want (rtol/atol), else a short description."""
    try:
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        return None
    except AssertionError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return "; ".join(lines[:4])


def one_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def timed_calls(fn, inputs, n):
    """Seconds per call for n calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    return times


def prepare(name, fn, inputs, want):
    """Compile, warm, check and calibrate one variant; its record."""
    rec = {"status": "ok"}
    try:
        t0 = time.perf_counter()
        got = fn(*inputs)
        rec["compile_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(WARM_CALLS):
            got = fn(*inputs)
        rec["warm_s"] = time.perf_counter() - t0
    except Exception as e:  # a variant that cannot compile is reported, not fatal
        rec.update(status="FAILED", error=one_line(e))
        return rec
    if name != BASE:
        why = disagreement(got, want)
        if why:
            rec.update(status="MISMATCH", error=why)
            return rec
    times = []
    while len(times) < MIN_CALLS or sum(times) < CALIBRATE_SECONDS:
        times += timed_calls(fn, inputs, 1)
    rec["calls"] = max(MIN_CALLS, round(ROUND_SECONDS / statistics.median(times)))
    rec["rounds_us"] = []
    return rec


def bench_model(key, label, make_model, make_inputs, rounds, sinkgraph, own_kernels=False):
    print(f"\n== {key}: {label}", flush=True)
    torch.manual_seed(0)
    model = make_model().eval()
    inputs = make_inputs()
    result = {"model": key, "label": label,
              "inputs": [list(t.shape) for t in inputs], "variants": {}}
    with torch.no_grad():
        want = model(*inputs)
        variants = make_variants(model, sinkgraph, own_kernels)
        recs = result["variants"]
        for name, (fn, backend) in variants.items():
            recs[name] = r = prepare(name, fn, inputs, want)
            mark = "ok" if r["status"] == "ok" else f"{r['status']}: {r['error']}"
            if backend is not None:
                counters = backend.counters()
                r["sinkgraph_counters"] = {k: counters.get(k, 0)
                                           for k in ("graphs_compiled", "fallback_nodes")}
                mark += (f" ({counters['graphs_compiled']} graph(s), "
                         f"{counters['fallback_nodes']} fallback node(s))")
            compile_s = f"{r['compile_s']:.2f} s" if "compile_s" in r else "-"
            print(f"  {name:<26} compile {compile_s:>9}  {mark}", flush=True)
        if recs[BASE]["status"] != "ok":
            print(f"  torch eager failed: {key} is not timed", flush=True)
            return result
        timed = [n for n in variants if recs[n]["status"] == "ok"]
        for r in range(rounds):
            order = timed[r % len(timed):] + timed[:r % len(timed)]
            for name in order:
                rec = recs[name]
                if rec["status"] != "ok":
                    continue
                gc.collect()
                try:
                    times = timed_calls(variants[name][0], inputs, rec["calls"])
                except Exception as e:
                    rec.update(status="FAILED", error="while timing: " + one_line(e))
                    continue
                rec["rounds_us"].append(statistics.median(times) * 1e6)
    summarize(recs)
    return result


def summarize(recs):
    """Per variant: median time per call and the speed-up over torch eager."""
    base = recs[BASE].get("rounds_us", [])
    for rec in recs.values():
        ts = rec.get("rounds_us")
        if rec["status"] != "ok" or not ts or len(ts) != len(base):
            continue
        ratios = [b / t for b, t in zip(base, ts)]
        rec.update(median_us=statistics.median(ts), speedup_rounds=ratios,
                   speedup_median=statistics.median(ratios),
                   speedup_min=min(ratios), speedup_max=max(ratios))


def fmt_time(us):
    return f"{us / 1000:.2f} ms" if us >= 10000 else f"{us:.1f} µs"


def fmt_speedup(rec):
    return (f"{rec['speedup_median']:.2f}x [{rec['speedup_min']:.2f}-"
            f"{rec['speedup_max']:.2f}]")


def print_model(result):
    print(f"\n{result['model']}: {result['label']}")
    print(f"  {'variant':<26} {'compile':>9} {'calls':>6} {'per call':>11}  "
          "speed-up over torch eager [min-max]")
    for name, rec in result["variants"].items():
        compile_s = f"{rec['compile_s']:.2f} s" if "compile_s" in rec else "-"
        if "median_us" in rec:
            speedup = "1 (baseline)" if name == BASE else fmt_speedup(rec)
            print(f"  {name:<26} {compile_s:>9} {rec['calls']:>6} "
                  f"{fmt_time(rec['median_us']):>11}  {speedup}")
        else:
            print(f"  {name:<26} {compile_s:>9} {'-':>6} {'-':>11}  "
                  f"{rec['status']}: {rec.get('error', 'not timed')}")
    sys.stdout.flush()


def print_summary(results):
    """One line per model: every variant's speed-up over torch eager."""
    names = [n for n in VARIANTS[1:] + [OWN_KERNELS] if any(n in r["variants"] for r in results)]
    print("\nSpeed-up over torch eager: median of per-round ratios [min-max]")
    print("| model | torch eager | " + " | ".join(names) + " |")
    print("| --- " * (len(names) + 2) + "|")
    for res in results:
        recs = res["variants"]
        base = recs[BASE]
        cells = [fmt_time(base["median_us"]) if "median_us" in base else base["status"]]
        for n in names:
            rec = recs.get(n, {"status": "-"})
            cells.append(fmt_speedup(rec) if "speedup_median" in rec else rec["status"])
        print(f"| {res['model']} | " + " | ".join(cells) + " |")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--models", default="all",
                    help="comma-separated keys (default: all): encoder, encoder_small, decoder, "
                         "mha, mlp, resnet18, resnet18_112, mobilenet_v3_small, efficientnet_b0, "
                         "convnext_tiny, vit")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 7; 3 with --small)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads and SINKGRAPH_NUM_THREADS (default 1)")
    ap.add_argument("--small", action="store_true",
                    help="64x64 images and 3 rounds: a quick run, not a measurement")
    ap.add_argument("--own-conv", action="store_true",
                    help=f"add the variant '{OWN_KERNELS}': max-autotune with "
                         "sinkgraph.set_use_onednn(False)")
    ap.add_argument("--out", default="build/bench-torch-models.json", help="the JSON file")
    args = ap.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.small else 7)
    if rounds < 1 or args.threads < 1:
        ap.error("--rounds and --threads must be at least 1")

    # sinkgraph reads SINKGRAPH_NUM_THREADS once, when it is loaded.
    os.environ["SINKGRAPH_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    import sinkgraph
    import torchvision

    # Five variants of one module share its forward's Dynamo cache entries.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)

    table = model_table(args.small)
    keys = list(table) if args.models == "all" else args.models.split(",")
    unknown = [k for k in keys if k not in table]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(table)}")

    meta = {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "sinkgraph": sinkgraph.__version__, "python": platform.python_version(),
            "cpu": cpu_name(), "cpus": os.cpu_count(), "threads": args.threads,
            "small": args.small, "rounds": rounds, "onednn": sinkgraph.onednn_built(), "round_seconds": ROUND_SECONDS,
            "rtol": RTOL, "atol": ATOL, "argv": sys.argv[1:],
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(f"torch {meta['torch']}, torchvision {meta['torchvision']}, sinkgraph "
          f"{meta['sinkgraph']}; {meta['cpu']}, {args.threads} thread(s), {rounds} round(s)"
          f"{', --small (64x64 images)' if args.small else ''}")
    if os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)

    results = []
    for key in keys:
        results.append(bench_model(key, *table[key], rounds, sinkgraph, args.own_conv))
        print_model(results[-1])
        torch._dynamo.reset()  # drop this model's compiled code before the next
        with open(args.out, "w") as f:  # after every model: a partial run keeps its figures
            json.dump({"meta": meta, "results": results}, f, indent=1)
    print_summary(results)
    print(f"\nEvery round's figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
