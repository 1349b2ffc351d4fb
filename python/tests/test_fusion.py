"""max-autotune's rewrites of AOTAutograd's graph (fusion.py), against torch eager.

Note [Written-out attention]: softmax(q @ k^T * c) @ v written out by hand
becomes one scaled_dot_product_attention in max-autotune, with the same
results as torch eager; what the rewrite must leave alone (a masked
attention, weights read elsewhere, a softmax over another dim) stays as
written and still gives torch's results.
"""

import math

import pytest
import torch

import sinkgraph
from conftest import make_backend

RTOL, ATOL = 1e-3, 1e-4


class Attention(torch.nn.Module):
    """A pre-norm block with hand-written attention, in the variants users write."""

    def __init__(self, dim=32, heads=4, scale="mul", mask=False, weights=False, dim_softmax=-1,
                 transpose_k=True):
        super().__init__()
        self.heads, self.scale, self.mask = heads, scale, mask
        self.weights, self.dim_softmax, self.transpose_k = weights, dim_softmax, transpose_k
        self.ln = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        kt = k.transpose(-2, -1) if self.transpose_k else k.permute(0, 1, 3, 2)
        att = q @ kt
        if self.scale == "mul":
            att = att * (1.0 / math.sqrt(k.size(-1)))
        elif self.scale == "div":
            att = att / math.sqrt(k.size(-1))
        elif self.scale == "left":
            att = (1.0 / math.sqrt(k.size(-1))) * att
        if self.mask:
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~causal, float("-inf"))
        p = torch.softmax(att, dim=self.dim_softmax)
        y = (p @ v).transpose(1, 2).contiguous().view(b, t, c)
        out = x + self.proj(y)
        return (out, p) if self.weights else out


def compile_and_check(model, inputs, mode="max-autotune"):
    backend = make_backend(mode)
    opt = torch.compile(model.eval(), backend=backend)
    with torch.no_grad():
        for x in inputs:
            want = model(x)
            for _ in range(2):  # capture, then replay
                torch.testing.assert_close(opt(x), want, rtol=RTOL, atol=ATOL)
    return backend


def fused(backend):
    return sum(g.attention_fused for g in backend.compiled)


def ops_in_regions(backend):
    """ATen targets of the compiled graphs' nodes (fusion rewrites them before partitioning)."""
    names = set()
    for g in backend.compiled:
        for r in g.regions:
            for n in r.runner.gm.graph.nodes:
                if n.op == "call_function":
                    names.add(getattr(n.target, "__name__", str(n.target)))
    return names


@pytest.mark.parametrize("scale", ["mul", "div", "left", "none"])
def test_written_out_attention_becomes_one_sdpa_with_torchs_results(scale):
    backend = compile_and_check(Attention(scale=scale), [torch.randn(1, 6, 32),
                                                         torch.randn(2, 6, 32)])
    # one Dynamo graph per batch size here (no dynamic=True): each fused
    assert fused(backend) == len(backend.compiled) >= 1
    ops = ops_in_regions(backend)
    assert "bmm.default" not in ops and "_softmax.default" not in ops, ops
    assert "written-out attention" in sinkgraph.explain(backend)


def test_k_permuted_instead_of_transposed_is_fused():
    backend = compile_and_check(Attention(transpose_k=False), [torch.randn(2, 5, 32)])
    assert fused(backend) == 1


def test_a_dynamic_batch_is_fused_once_and_right():
    model = Attention().eval()
    backend = make_backend("max-autotune")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        # (sizes of 2 and more: Dynamo specializes a size of 1)
        for b in [2, 3, 5, 3]:
            x = torch.randn(b, 7, 32)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)
    assert fused(backend) == len(backend.compiled) == 1


def test_past_32_query_rows_or_a_dynamic_length_it_stays_as_written_and_right():
    # Past 32 rows the products run oneDNN, which beat the fused kernel
    # (Note [Written-out attention]); a dynamic length has no bound.
    model = Attention().eval()
    backend = make_backend("max-autotune")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        x = torch.randn(1, 40, 32)
        torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)
        for t in [4, 9]:
            x = torch.randn(2, t, 32)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)
    assert fused(backend) == 0


@pytest.mark.parametrize("case", ["masked", "weights_returned", "softmax_over_heads"])
def test_what_the_rewrite_leaves_alone_keeps_torchs_results(case):
    model = {"masked": Attention(mask=True), "weights_returned": Attention(weights=True),
             "softmax_over_heads": Attention(dim_softmax=1)}[case]
    backend = make_backend("max-autotune")
    opt = torch.compile(model.eval(), backend=backend)
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        want = model(x)
        for _ in range(2):
            torch.testing.assert_close(opt(x), want, rtol=RTOL, atol=ATOL)
    assert fused(backend) == 0


def test_a_fully_masked_row_stays_nan_as_in_eager():
    # The rewrite would turn this row's NaN into zeros (torch's CPU sdpa):
    # masked attention is left as written, so the NaN stays.
    class FullyMasked(Attention):
        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for z in self.qkv(x).split(c, dim=2))
            att = (q @ k.transpose(-2, -1)) * 0.5
            keep = torch.ones(t, t, dtype=torch.bool)
            keep[0] = False
            p = torch.softmax(att.masked_fill(~keep, float("-inf")), dim=-1)
            return (p @ v).transpose(1, 2).contiguous().view(b, t, c)

    model = FullyMasked().eval()
    backend = make_backend("max-autotune")
    opt = torch.compile(model, backend=backend)
    x = torch.randn(1, 4, 32)
    with torch.no_grad():
        want, got = model(x), opt(x)
    assert torch.isnan(want[:, 0]).all() and torch.isnan(got[:, 0]).all()
    torch.testing.assert_close(got[:, 1:], want[:, 1:], rtol=RTOL, atol=ATOL)
    assert fused(backend) == 0


def test_reduce_overhead_captures_the_graph_as_written():
    backend = compile_and_check(Attention(), [torch.randn(2, 6, 32)], mode="reduce-overhead")
    assert fused(backend) == 0
