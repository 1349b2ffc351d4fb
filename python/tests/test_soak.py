"""A short soak (issue 36, item 5; bench/soak.py runs the long one): 50 000
replays of a small compiled module leave resident memory flat, and the last
outputs still equal eager's."""
import pytest
import torch

import sinkgraph
from conftest import make_backend, rss_kib


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_many_replays_keep_memory_flat(mode):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 64)).eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    xs = [torch.randn(2, 64) for _ in range(8)]
    with torch.no_grad():
        for _ in range(2000):  # warm: allocator pools, caches
            for x in xs[:1]:
                opt(x)
        before = rss_kib()
        for i in range(50_000):
            opt(xs[i % 8])
        grown = rss_kib() - before
        for x in xs:
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    # One leaked 64-byte block per call would be 3 MiB.
    assert grown < 1024, f"resident memory grew {grown} KiB over 50 000 replays"
    c = sinkgraph.counters(backend)
    assert c["captured"] == 1 and c["replayed"] > 50_000, c
