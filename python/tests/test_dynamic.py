"""Dynamic shapes: one Dynamo graph for every size, one capture per concrete shape."""
import pytest
import torch

import sinkgraph
from conftest import make_backend


def _model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4)).eval()


def _dynamo_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
def test_one_dynamo_graph_each_shape_captured_once(how):
    torch._dynamo.reset()
    model = _model()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend, dynamic=True if how == "dynamic=True" else None)
    before = _dynamo_graphs()
    with torch.no_grad():
        for b in [3, 5, 3, 7, 5, 3]:
            x = torch.randn(b, 8)
            if how == "mark_dynamic":
                torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    assert _dynamo_graphs() - before == 1
    c = sinkgraph.counters(backend)
    assert c["graphs_compiled"] == 1
    assert c["captured"] == 3 and c["replayed"] == 6, c  # sizes 3, 5, 7


def test_capture_limit_falls_back_to_eager_and_counts_it():
    torch._dynamo.reset()
    model = _model()
    backend = make_backend("reduce-overhead", capture_limit=2)
    opt = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for b in [2, 3, 4, 5, 2]:
            x = torch.randn(b, 8)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["captured"] == 2 and c["eager_fallback_due_to_capture_limit"] == 2, c
    assert "recompile limit" in sinkgraph.explain(backend)
