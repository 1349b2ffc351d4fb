"""Partitioning: what has no converter runs in torch; constants fold; writes land in the caller's tensors."""
import pytest
import torch

import sinkgraph
from conftest import MODES, make_backend


class WithCumsum(torch.nn.Module):
    """cumsum has no converter: it runs in torch between two sinkgraph regions."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.cumsum(self.a(x).relu(), dim=-1))


@pytest.mark.parametrize("mode", MODES)
def test_nodes_without_converters_run_in_torch_and_are_named(mode):
    model = WithCumsum().eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["fallback_nodes"] == 1, c
    text = sinkgraph.explain(backend)
    assert "fallback: " in text and "cumsum" in text and "no converter" in text, text
    assert "2 sinkgraph regions" in text
    if mode != "eager":
        assert c["captured"] == 2 and c["replayed"] == 6  # two regions, three calls


class CausalMask(torch.nn.Module):
    def __init__(self, n=6):
        super().__init__()
        self.n = n
        self.proj = torch.nn.Linear(n, n)

    def forward(self, x):
        ones = torch.ones(self.n, self.n, dtype=torch.bool)
        mask = torch.bitwise_not(torch.tril(ones))
        bias = torch.zeros(self.n, self.n).masked_fill(mask, -1e4)
        return torch.softmax(self.proj(x) + bias, dim=-1)


def test_a_subgraph_of_constants_is_folded_at_compile_time():
    model = CausalMask().eval()
    backend = make_backend("max-autotune")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        x = torch.randn(6, 6)
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["fallback_nodes"] == 0, sinkgraph.explain(backend)
    text = sinkgraph.explain(backend)
    assert "0 constant nodes folded" not in text, text


def test_a_graph_of_only_fallback_nodes_is_one_clear_error():
    def f(x):
        return torch.cumsum(x, 0)

    opt = torch.compile(f, backend=make_backend("reduce-overhead"))
    with pytest.raises(Exception, match="no node has a sinkgraph converter.*cumsum"):
        opt(torch.randn(4))


class KVStep(torch.nn.Module):
    """A decode step writing its KV cache at a tensor position (index_copy_)."""

    def __init__(self, slots=16, dim=8):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, slots, dim))
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x, pos):  # x [1, 2, 1, dim], pos [1] int64
        self.cache.index_copy_(2, pos, self.proj(x))
        return self.cache.mean(dim=2)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_kv_cache_written_in_place_is_one_replay_per_step(mode):
    torch.manual_seed(0)
    model, ref = KVStep().eval(), KVStep().eval()
    ref.load_state_dict(model.state_dict())
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for step in range(6):
            x, pos = torch.randn(1, 2, 1, 8), torch.tensor([step])
            torch.testing.assert_close(opt(x, pos), ref(x, pos), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(model.cache, ref.cache, rtol=1e-4, atol=1e-5)
    c = sinkgraph.counters(backend)
    assert c["fallback_nodes"] == 0 and c["captured"] == 1 and c["replayed"] == 6, c
