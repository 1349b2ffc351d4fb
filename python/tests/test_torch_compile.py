"""On torch >= 2.0 the same backend works through torch.compile (the device machine runs this)."""

import pytest
import torch

import sinkgraph
from conftest import MODES, make_backend

TORCH2 = int(torch.__version__.split(".")[0]) >= 2


@pytest.mark.skipif(not TORCH2, reason="torch.compile needs torch >= 2.0 (Debian has 1.13)")
@pytest.mark.parametrize("mode", MODES)
def test_torch_compile_with_sinkgraph_backend(mode):
    model = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend, dynamic=False)
    x = torch.randn(2, 10, 64)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(opt(x), model(x))
    assert sinkgraph.counters(backend)["fallback_nodes"] == 0
