#!/usr/bin/env python3
"""Benchmark: greedy decoding through transformers' generate with a static KV cache.

What it measures. For each model, batch 1, greedy, NEW new tokens (--new,
default 128) after a short prompt, in one process, these variants of
`model.generate(ids, max_new_tokens=NEW, do_sample=False, cache=cache)` with a
StaticCache per variant, reset before each call (the recipe docs/python.md
gives for repeated calls):

  transformers eager           the model itself
  inductor                     model.forward = torch.compile(model.forward), torch's
                               default backend and mode (static cache, as the docs do)
  sinkgraph reduce-overhead    model.forward = torch.compile(model.forward,
  sinkgraph max-autotune           backend="sinkgraph", mode=...)
  sinkgraph CLI                `sinkgraph generate --model DIR` on the same folder,
                               a separate process (C++ only, no transformers);
                               its mode is --cli-mode (default reduce-overhead)

Models: `tiny` (a seeded LlamaForCausalLM: hidden 256, 4 layers, 4 heads,
MLP 768, vocab 8192, saved with save_pretrained) and `stories260K` (the
shipped checkpoint, converted by `sinkgraph convert --to hf`).

1. Warm every variant with two generates (its compile); a variant that raises
   or whose ids differ from eager's is marked FAILED or MISMATCH and not
   timed.
2. R rounds (--rounds, default 5). Each round runs every variant's generate
   once, the order rotating from round to round. Two figures per variant and
   round: generate's tokens per second, NEW / (wall time of the generate,
   prefill and transformers' own Python per step included), and the decode
   step, the median wall time of model.forward over the decode steps (a
   wrapper around the compiled forward times each call). The CLI's figures
   are its own --stats `decode_us_per_token` for the step and
   `decode_tokens_per_s` (its process start and model load are not in them).
3. Reported per variant: the median of each figure over rounds and its ratio
   to transformers eager and to Inductor, the median of per-round ratios with
   their min-max in brackets.

Each model's variants compile in turn after torch._dynamo.reset() (every
model instance is a new Dynamo graph of the same forward code). Dynamo
counts its recompiles per code object, and every variant compiles the same
forward (transformers' deprecation wrapper around it): a prefill, a decode
step and one more entry when a size turns dynamic, three per variant, past
the default recompile_limit of 8 with three variants in one process, after
which Dynamo runs the frame uncompiled. The benchmark allows 8 per variant.

Run from the repository root, after the release build, on a quiet machine:

  PYTHONPATH=build/release/python .venv/bin/python bench/hf_decode.py
  ... --models tiny --rounds 3 --new 32 --threads 1 --out build/bench-hf-decode.json

--threads T (default 1): torch.set_num_threads(T) and SINKGRAPH_NUM_THREADS=T
(set before sinkgraph is imported; the CLI gets --threads T).
"""

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "build" / "release" / "tools" / "sinkgraph"
STORIES = ROOT / "models" / "stories260K"
VARIANTS = {"eager": "transformers eager", "inductor": "inductor",
            "reduce-overhead": "sinkgraph reduce-overhead",
            "max-autotune": "sinkgraph max-autotune", "cli": "sinkgraph CLI"}


def make_tiny(folder):
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=768,
                                   num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=4, max_position_embeddings=512,
                                   bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)


def make_stories(folder):
    subprocess.run([str(CLI), "convert", "--from", "llama2c", "--to", "hf",
                    str(STORIES / "stories260K.bin"), str(folder)], check=True,
                   capture_output=True)


def load(folder):
    import transformers
    return transformers.LlamaForCausalLM.from_pretrained(folder).eval()


class Variant:
    def __init__(self, name, folder, prompt, new, threads, cli_mode):
        import torch
        self.name, self.folder, self.prompt, self.new = name, folder, prompt, new
        self.threads, self.cli_mode = threads, cli_mode
        self.status, self.ids = "ok", None
        if name == "sinkgraph CLI":
            return
        import transformers
        self.model = load(folder)
        # One StaticCache per variant, reset before each generate (docs/python.md,
        # "Hugging Face transformers": a fresh cache per call is a new address
        # set for sinkgraph, one capture per generate).
        self.cache = transformers.StaticCache(config=self.model.config,
                                              max_cache_len=len(prompt) + new - 1)
        forward = self.model.forward
        if name == "inductor":
            forward = torch.compile(forward)
        elif name.startswith("sinkgraph"):
            forward = torch.compile(forward, backend="sinkgraph", mode=name.split()[-1])
        self.step_times = []

        def timed(*a, **kw):
            t0 = time.perf_counter()
            out = forward(*a, **kw)
            self.step_times.append(time.perf_counter() - t0)
            return out
        self.model.forward = timed

    def run(self):
        """One generate; returns (ids, tokens per second, decode step in µs)."""
        if self.name == "sinkgraph CLI":
            out = subprocess.run(
                [str(CLI), "generate", "--model", str(self.folder), "--steps", str(self.new),
                 "--prompt-ids", " ".join(map(str, self.prompt)), "--mode", self.cli_mode,
                 "--threads", str(self.threads), "--print-ids", "--stats"],
                check=True, capture_output=True, text=True).stdout.splitlines()
            ids = [int(t) for t in out[0].split(":", 1)[1].split()]
            stats = json.loads(out[-1])
            return ids, stats["decode_tokens_per_s"], stats["decode_us_per_token"]
        import torch
        x = torch.tensor([self.prompt])
        self.step_times.clear()
        self.cache.reset()
        with torch.no_grad():
            t0 = time.perf_counter()
            out = self.model.generate(x, max_new_tokens=self.new, do_sample=False,
                                      cache=self.cache, pad_token_id=0, eos_token_id=None)
            dt = time.perf_counter() - t0
        step = statistics.median(self.step_times[1:]) * 1e6  # [0] is the prefill
        return out[0, len(self.prompt):].tolist(), self.new / dt, step


def bench_model(key, folder, prompt, args):
    variants = [Variant(VARIANTS[k], folder, prompt, args.new, args.threads, args.cli_mode)
                for k in args.variants]
    ref = reference(key, args)
    print(f"\n{key}: {args.new} new tokens after {len(prompt)} prompt tokens", flush=True)
    for v in variants:
        t0 = time.perf_counter()
        try:
            # Twice: the kept cache's first reuse costs Dynamo one more graph.
            v.ids, _, _ = v.run()
            if v.status == "ok":
                v.ids, _, _ = v.run()
        except Exception as e:  # noqa: BLE001 - a failed variant is reported, the run goes on
            v.status = f"FAILED ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
        if v.status == "ok":
            if ref is None:
                ref = v.ids  # the first variant's, transformers eager by default
            elif v.ids != ref:
                v.status = f"MISMATCH (ids differ from {REF_NAME[key]})"
        print(f"  {v.name:27s} warm-up {time.perf_counter() - t0:6.2f} s  {v.status}", flush=True)
    timed = [v for v in variants if v.status == "ok"]
    rounds = {v.name: [] for v in timed}
    steps = {v.name: [] for v in timed}
    for r in range(args.rounds):
        order = timed[r % len(timed):] + timed[:r % len(timed)]
        for v in order:
            ids, tps, step = v.run()
            if ids != ref:
                v.status = f"MISMATCH (ids differ from {REF_NAME[key]}, round {r + 1})"
            rounds[v.name].append(tps)
            steps[v.name].append(step)
    return {"variants": [{"name": v.name, "status": v.status,
                          "tokens_per_s": rounds.get(v.name, []),
                          "decode_step_us": steps.get(v.name, [])} for v in variants]}


REF_NAME = {}


def reference(key, args):
    """The ids every variant must give: the shipped reference for stories260K
    with --reference, else None (the first variant's ids)."""
    if args.reference and key == "stories260K":
        REF_NAME[key] = "the shipped reference ids"
        ids = [int(t) for t in Path(args.reference).read_text().split()]
        if len(ids) < args.new:
            raise SystemExit(f"--reference holds {len(ids)} ids, fewer than --new {args.new}")
        return ids[:args.new]
    REF_NAME[key] = VARIANTS[args.variants[0]]
    return None


def brief(results):
    """One line per variant (the main job's form): tokens/s of generate and the
    speed-up over transformers eager."""
    lines = []
    for res in results.values():
        by = {v["name"]: v for v in res["variants"]}
        eager = by.get("transformers eager", {}).get("tokens_per_s")
        for v in res["variants"]:
            t = v["tokens_per_s"]
            if v["status"] != "ok" or not t:
                lines.append(f"{v['name']:27s} {v['status']}")
                continue
            over = ratio(t, eager).replace(" [", " eager (").replace("]", ")") if eager else ""
            lines.append(f"{v['name']:27s} {statistics.median(t):6.0f} tokens/s  "
                         f"{statistics.median(v['decode_step_us']):7.1f} us/decode step  "
                         f"{over}  ids match: yes")
    return "\n".join(lines)


def ratio(a, b):
    rs = [x / y for x, y in zip(a, b)]
    return f"{statistics.median(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"


def report(results):
    lines = ["| model | variant | generate tok/s | over eager | over inductor | decode step | "
             "step: over eager | step: over inductor |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, res in results.items():
        by = {v["name"]: v for v in res["variants"]}
        for v in res["variants"]:
            t, s = v["tokens_per_s"], v["decode_step_us"]
            if v["status"] != "ok" or not t:
                lines.append(f"| {key} | {v['name']} | {v['status']} | | | | | |")
                continue
            cells = [f"{statistics.median(t):.0f}"]
            for field, faster in (("tokens_per_s", lambda a, b: (a, b)),
                                  ("decode_step_us", lambda a, b: (b, a))):
                if field == "decode_step_us":
                    cells.append(f"{statistics.median(s):.0f} µs")
                for base in ("transformers eager", "inductor"):
                    b = by.get(base)
                    ref = b[field] if b is not None and b["status"] == "ok" else None
                    if v["name"] == base or not ref:
                        cells.append("")
                        continue
                    cells.append(ratio(*faster(v[field], ref)))
            lines.append(f"| {key} | {v['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--models", default="tiny,stories260K", help="tiny, stories260K")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new", type=int, default=128, help="new tokens per generate")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cli-mode", default="reduce-overhead",
                    choices=["eager", "reduce-overhead", "max-autotune"])
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, of {', '.join(VARIANTS)}; without --reference the "
                         "first one's ids are the ones the others must give")
    ap.add_argument("--reference", default=None,
                    help="a file of ids that every stories260K run must give (the shipped "
                         "models/stories260K/bos_greedy_200.txt); else eager's ids")
    ap.add_argument("--brief", action="store_true",
                    help="one line per variant (the main job's output) instead of the table")
    ap.add_argument("--out", default="build/bench-hf-decode.json")
    args = ap.parse_args(argv)
    args.variants = args.variants.split(",")
    for k in args.variants:
        if k not in VARIANTS:
            ap.error(f"unknown variant {k!r} ({', '.join(VARIANTS)})")
    if args.rounds < 1 or args.new < 1 or args.threads < 1:
        ap.error("--rounds, --new and --threads must be at least 1")
    keys = args.models.split(",")
    for k in keys:
        if k not in ("tiny", "stories260K"):
            ap.error(f"unknown model {k!r} (tiny, stories260K)")
    os.environ["SINKGRAPH_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    import transformers
    # Quiet: no progress bars or config notes from transformers, and no note
    # from torch's C++-extension helper that this CUDA build finds no CUDA.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{args.threads} thread(s), {args.rounds} rounds", flush=True)
    # Every variant compiles the same forward code: 8 recompiles each (see the docstring).
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                               8 * len(args.variants))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            torch._dynamo.reset()
            folder = Path(tmp) / key
            if key == "tiny":
                make_tiny(folder)
                prompt = [1, 15, 27, 300, 4000, 12, 9, 81]
            else:
                make_stories(folder)
                prompt = [1]
            results[key] = bench_model(key, folder, prompt, args)
    if args.brief:
        print(brief(results))
    else:
        print("\nMedians over rounds; ratios (speed-ups): median of per-round ratios "
              "[min-max]. The CLI's tok/s is decode only (see --help).")
        print(report(results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(f"\nEvery round's figures: {args.out}")
    return 0 if all(v["status"] == "ok" for r in results.values() for v in r["variants"]) else 1


if __name__ == "__main__":
    sys.exit(main())
