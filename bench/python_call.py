#!/usr/bin/env python3
"""Benchmark: what one call of a compiled module costs from Python (issue 33).

Two parts, each interleaved in one process (every round times every variant
once, in a rotated order; a variant's figure for a round is the median of
--calls calls; reported: the median over rounds with min-max).

fixed   The fixed cost of a call: nn.Linear(8, 8) on one row, so the kernel
        is negligible and what is timed is the path around it.
          torch eager          the module itself
          dynamo floor         torch.compile with a backend whose compiled
                               function returns a stored result: Dynamo's
                               guard check and frame handling only
          dynamo+aot floor     the same behind aot_module_simplified: adds
                               AOTAutograd's runtime wrapper
          sinkgraph RO / MA    reduce-overhead and max-autotune
        "above floor" is a variant's time minus the dynamo floor's, per
        round: sinkgraph's whole cost after Dynamo's guard check (AOTAutograd's
        wrapper, the region, the C++ call with its replay and kernel, and the
        tensors in and out).

modules Per-call time of one small compiled module (a 64-128-64 MLP) in
        reduce-overhead after N other distinct modules were compiled and run
        in the same process (N = 0, 10, 50, 100, 200 by default): flat if a
        call's cost does not depend on what else the process compiled.

Run from the repository root after the release build, on a quiet machine:

  PYTHONPATH=build/release/python .venv/bin/python bench/python_call.py
  ... --part fixed --rounds 9 --calls 2000 --threads 1
  ... --part modules --counts 0,10,50,100,200
"""

import argparse
import os
import statistics
import sys
import time


def median_call_us(fn, x, calls):
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def interleave(variants, x, rounds, calls):
    """{name: [per-round median µs]}, variants timed in a rotated order."""
    names = list(variants)
    out = {n: [] for n in names}
    for r in range(rounds):
        for k in range(len(names)):
            n = names[(k + r) % len(names)]
            out[n].append(median_call_us(variants[n], x, calls))
    return out


def spread(values):
    return f"{statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]"


def fixed_part(args, torch, sinkgraph):
    from torch._functorch.aot_autograd import aot_module_simplified

    def stored_result(gm, example_inputs):
        out = gm(*example_inputs)
        return lambda *a: out

    def aot_stored_result(gm, example_inputs):
        def compiler(g, ex):
            out = g(*ex)

            def run(a):
                a.clear()
                return out

            run._boxed_call = True
            return run

        return aot_module_simplified(gm, example_inputs, fw_compiler=compiler)

    def sg_backend(mode):
        cfg = sinkgraph.CompilerConfig()
        cfg.mode = mode
        return sinkgraph.get_backend(compiler_config=cfg)

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8).eval()
    x = torch.randn(1, 8)
    variants = {"torch eager": model}
    for name, backend in [("dynamo floor", stored_result),
                          ("dynamo+aot floor", aot_stored_result),
                          ("sinkgraph RO", sg_backend("reduce-overhead")),
                          ("sinkgraph MA", sg_backend("max-autotune"))]:
        variants[name] = torch.compile(model, backend=backend)
    with torch.no_grad():
        want = model(x)
        for name, fn in variants.items():
            for _ in range(50):
                got = fn(x)
            if not name.endswith("floor"):
                torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        res = interleave(variants, x, args.rounds, args.calls)
    print(f"fixed cost of a call: nn.Linear(8, 8), 1x8, {args.rounds} rounds x {args.calls} "
          f"calls, {torch.get_num_threads()} torch thread(s)")
    print(f"{'variant':18} {'us per call':>22} {'above dynamo floor':>24}")
    floor = res["dynamo floor"]
    for name, values in res.items():
        above = [v - f for v, f in zip(values, floor)]
        extra = spread(above) if name != "torch eager" and name != "dynamo floor" else ""
        print(f"{name:18} {spread(values):>22} {extra:>24}")
    return res


def modules_part(args, torch, sinkgraph):
    cfg = sinkgraph.CompilerConfig()
    cfg.mode = "reduce-overhead"
    backend = sinkgraph.get_backend(compiler_config=cfg)

    def mlp(i=0):
        # Each module gets a forward of its own (a new code object), so that
        # Dynamo compiles it as its own frame: its own graph, region and pool.
        # Instances of one class share one Dynamo graph instead, and in
        # reduce-overhead each instance's parameter addresses are a new graph
        # key of that graph (docs/performance.md, "Many compiled modules").
        ns = {}
        exec(f"def forward(self, x):\n    return self.l2(self.act(self.l1(x))) * {1 + i}", ns)
        cls = type(f"Mlp{i}", (torch.nn.Module,), {"forward": ns["forward"]})
        m = cls()
        m.l1, m.act, m.l2 = torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)
        return m.eval()

    torch.manual_seed(0)
    x = torch.randn(4, 64)
    probe_model = mlp()
    probe = torch.compile(probe_model, backend=backend)
    others = []
    counts = sorted(int(c) for c in args.counts.split(","))
    print(f"per-call time of one compiled MLP (64-128-64, 4 rows, reduce-overhead) after N other "
          f"compiled modules; {args.rounds} rounds x {args.calls} calls")
    print(f"{'N':>5} {'us per call':>22} {'torch eager':>22} {'speed-up vs eager':>22}")
    rows = []
    with torch.no_grad():
        want = probe_model(x)
        for n in counts:
            while len(others) < n:
                m = torch.compile(mlp(len(others) + 1), backend=backend)
                m(x)
                others.append(m)
            for _ in range(50):
                got = probe(x)
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
            res = interleave({"probe": probe, "eager": probe_model}, x, args.rounds, args.calls)
            rows.append((n, res["probe"], res["eager"]))
            ratio = [e / p for p, e in zip(res["probe"], res["eager"])]
            print(f"{n:>5} {spread(res['probe']):>22} {spread(res['eager']):>22} "
                  f"{spread(ratio):>22}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["fixed", "modules", "all"], default="all")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads and SINKGRAPH_NUM_THREADS (default 1)")
    p.add_argument("--counts", default="0,10,50,100,200",
                   help="modules part: numbers of other compiled modules")
    args = p.parse_args(argv)
    os.environ["SINKGRAPH_NUM_THREADS"] = str(args.threads)
    import torch
    import sinkgraph
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 1024  # the modules part compiles many modules
    if args.part in ("fixed", "all"):
        fixed_part(args, torch, sinkgraph)
    if args.part in ("modules", "all"):
        modules_part(args, torch, sinkgraph)
    return 0


if __name__ == "__main__":
    sys.exit(main())
