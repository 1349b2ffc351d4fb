"""The seed's line on real Dynamo: get_backend, backend="sinkgraph" by name, mode and options."""
import os
import subprocess
import sys

import pytest
import torch

import sinkgraph
from conftest import MODES, make_backend


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 8)).eval()


@pytest.mark.parametrize("mode", MODES)
def test_get_backend_in_every_mode(mode):
    torch._dynamo.reset()  # a fresh frame cache, whatever ran before in this process
    model = _mlp()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for b in (1, 2, 1, 2):
            x = torch.randn(b, 16)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["graphs_compiled"] >= 1 and c["fallback_nodes"] == 0
    if mode == "eager":
        assert c["captured"] == 0 and c["replayed"] == 0
    else:  # one capture per shape, every later call a replay
        assert c["captured"] == 2 and c["replayed"] == 4, c


BY_NAME = r"""
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
x = torch.randn(2, 16)
kwargs = eval(sys.argv[1])
opt = torch.compile(model, backend="sinkgraph", **kwargs)
with torch.no_grad():
    for _ in range(3):
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
assert "sinkgraph" in sys.modules  # loaded by the entry point, not by this script
# Note [Hooks added after compilation]: a hook added now is seen, and its removal.
with torch.no_grad():
    handle = model[0].register_forward_hook(lambda mod, inp, out: out * 2 + 1)
    torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    handle.remove()
    torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
import sinkgraph
(b,) = [b for b in sinkgraph.backend.all_backends()]
print(b.compiler_config.mode, b.compiler_config.capture_limit, sinkgraph.counters())
"""


def _by_name(kwargs):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", BY_NAME, repr(kwargs)], capture_output=True,
                          text=True, env=env, timeout=600)


# Two captures: the model, then the model with the hook (a recompile); with
# the hook removed, the first graph's guards hold again.
@pytest.mark.parametrize("kwargs,mode,captured", [
    ({}, "max-autotune", 2),  # CompilerConfig's default, TorchAir's
    ({"mode": "reduce-overhead"}, "reduce-overhead", 2),
    ({"mode": "max-autotune"}, "max-autotune", 2),
    ({"options": {"mode": "eager", "capture_limit": 3}}, "eager", 0),
])
def test_backend_by_name_in_a_process_that_never_imported_sinkgraph(kwargs, mode, captured):
    r = _by_name(kwargs)
    assert r.returncode == 0, r.stderr[-3000:]
    words = r.stdout.split(maxsplit=2)
    assert words[0] == mode
    c = eval(words[2])
    assert c["captured"] == captured and c["fallback_nodes"] == 0, c
    if "options" in kwargs:
        assert words[1] == "3"


def test_an_unknown_option_is_an_error_naming_it():
    r = _by_name({"options": {"capture_limt": 2}})
    assert r.returncode != 0
    assert "capture_limt" in r.stderr and "capture_limit" in r.stderr, r.stderr[-2000:]


def test_an_unknown_mode_is_an_error_naming_the_choices():
    r = _by_name({"mode": "fastest"})
    assert r.returncode != 0
    assert "fastest" in r.stderr and "reduce-overhead" in r.stderr, r.stderr[-2000:]


def test_counters_explain_and_reset():
    sinkgraph.reset_counters()
    backend = make_backend("reduce-overhead")
    model = _mlp()
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            opt(torch.randn(1, 16))
    mine = sinkgraph.counters(backend)
    assert mine["captured"] == 1 and mine["replayed"] == 3 and mine["graphs_compiled"] == 1
    everything = sinkgraph.counters()
    assert everything["replayed"] >= 3 and set(mine) == set(everything)
    text = sinkgraph.explain(backend)
    assert "capture: first call" in text and "0 fallback nodes" in text, text
    sinkgraph.reset_counters()
    assert sinkgraph.counters(backend)["replayed"] == 0
    with torch.no_grad():
        torch.testing.assert_close(opt(torch.ones(1, 16)), model(torch.ones(1, 16)))


def test_graph_breaks_are_compiled_on_both_sides_and_reported():
    torch._dynamo.reset()
    sinkgraph.reset_counters()

    class Breaks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x).relu()
            if y.sum().item() > 0:  # data-dependent: Dynamo breaks the graph here
                y = y * 2
            return self.b(y)

    model = Breaks().eval()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 8)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    assert sinkgraph.counters(backend)["graphs_compiled"] >= 2
    assert "graph break" in sinkgraph.explain(backend)


class _Planned(torch.nn.Module):
    """A graph whose one region reads its inputs out of order (y before x)
    and a constant folded at compile time (the arange)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x, y):
        return (y @ self.w.T + torch.arange(4.0) * x.sum(), y - x)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_region_fed_by_reordered_inputs_and_constants_is_called_by_plan(mode):
    """Note [Arguments by plan]: no FX module around the region, the same
    results as eager for every shape (two layouts of outputs) and every call."""
    from sinkgraph.backend import all_backends
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Planned().eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for rows in (3, 5, 3, 5, 2):
            x, y = torch.randn(rows, 4), torch.randn(rows, 4)
            got, want = opt(x, y), model(x, y)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    graphs = [g for b in all_backends() if b is backend for g in b.compiled]
    assert graphs and all(g.whole for g in graphs), [g.explain() for g in graphs]
    planned = [r for g in graphs for r in g.regions if r._plan is not None]
    assert planned, "expected a region called by plan"
    assert any(isinstance(p, torch.Tensor) for p in planned[0]._plan), planned[0]._plan
    assert sinkgraph.counters(backend)["replayed"] >= 2


def test_a_region_called_by_plan_from_four_threads_gives_eager_results():
    """The plan and its constants are shared by every caller: four threads
    calling one compiled module at two shapes each get eager's results."""
    import threading
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Planned().eval()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        opt(torch.randn(3, 4), torch.randn(3, 4))  # compiled before the threads start
    errors = []

    def work(t):
        try:
            torch.set_grad_enabled(False)
            g = torch.Generator().manual_seed(t)
            for i in range(40):
                rows = 3 if (i + t) % 2 else 5
                x, y = torch.randn(rows, 4, generator=g), torch.randn(rows, 4, generator=g)
                for got, want in zip(opt(x, y), model(x, y)):
                    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    planned = [r for b in [backend] for g in b.compiled for r in g.regions if r._plan is not None]
    assert planned and sinkgraph.counters(backend)["replayed"] >= 100
