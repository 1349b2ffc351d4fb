"""ATen operators without a converter: libtorch fallback in eager/reduce-overhead, an error in max-autotune."""

import pytest
import torch

import sinkgraph
from conftest import make_backend


class UsesCumsum(torch.nn.Module):
    """torch.cumsum and torch.flip have no sinkgraph converter."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(torch.flip(torch.cumsum(self.lin(x), dim=1), [0]))


@pytest.mark.parametrize("mode", ["eager", "reduce-overhead"])
def test_ops_without_converters_run_through_libtorch(mode):
    model = UsesCumsum().eval()
    opt = sinkgraph.compile(model, backend=make_backend(mode))
    x = torch.randn(3, 8)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(opt(x), model(x))
        model.lin.weight.mul_(-1)  # captured fallback kernels read the static buffers
        torch.testing.assert_close(opt(x), model(x))
    c = sinkgraph.counters(opt)
    assert c["fallback_nodes"] == 2
    report = sinkgraph.explain(opt)
    assert "aten.cumsum.default" in report and "aten.flip.default" in report
    if mode == "reduce-overhead":
        assert c["captured"] == 1 and c["replayed"] == 4  # the capturing call replays too


def test_max_autotune_lists_the_ops_without_converters():
    opt = sinkgraph.compile(UsesCumsum().eval(), backend=make_backend("max-autotune"))
    with torch.no_grad(), pytest.raises(sinkgraph.Error) as e:
        opt(torch.randn(3, 8))
    assert "aten.cumsum.default" in str(e.value) and "aten.flip.default" in str(e.value)
