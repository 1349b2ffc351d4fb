"""Each converter against torch, through torch.compile: small functions, one operator family each.

The model tests (test_models.py) cover the converters those models use; these
cover the registry's entries on their own, in reduce-overhead (capture and
replay) and max-autotune, and check that no node fell back to torch. Where a
converter's capability check leaves a call to torch (a mask, a strided read
sinkgraph cannot express), the result must still be torch's, with the node
named as a fallback.
"""

import operator

import pytest
import torch
import torch.nn.functional as F

import sinkgraph
from conftest import make_backend

RTOL, ATOL = 1e-3, 1e-4


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Every case compiles the same Fn.forward: without a reset, Dynamo's
    # recompile limit for that code object would send later cases to eager.
    torch._dynamo.reset()


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def run(fn, args, mode, calls=2):
    """fn compiled by sinkgraph in `mode`, compared with torch on `args`; returns the backend."""
    model = Fn(fn).eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        want = model(*[a.clone() for a in args])
        for _ in range(calls):
            got = opt(*[a.clone() for a in args])
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
            assert strides(got, want) == strides(want, want), (strides(got), strides(want))
    return backend


def is_dense(t):
    """True when t's elements fill its storage span in some dim order."""
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def strides(value, like=None):
    """The strides of every tensor in a (nested) result, in order, those of
    dims of size 1 left out (they address nothing): code after a compiled
    module (a view, a DLPack consumer) may depend on them. Where torch's own
    result (`like`) is not dense (a slice of a larger tensor), a dense copy
    is as good, and only the shape is compared."""
    if isinstance(value, torch.Tensor):
        if like is not None and not is_dense(like):
            return [tuple(value.shape)]
        return [tuple(s for s, n in zip(value.stride(), value.shape) if n != 1)]
    if isinstance(value, (list, tuple)):
        likes = like if isinstance(like, (list, tuple)) else [None] * len(value)
        return [s for v, w in zip(value, likes) for s in strides(v, w)]
    return []


def fallback_targets(backend):
    return sorted(target for g in backend.compiled for _, _, target in g.fallback)


x34 = lambda: torch.randn(3, 4)  # noqa: E731


def sdpa_qkv(b=2, h=4, lq=5, lk=7, d=8):
    return [lambda: torch.randn(b, h, lq, d), lambda: torch.randn(b, h, lk, d),
            lambda: torch.randn(b, h, lk, d)]


def masked_rows(lq, lk, rows):
    """An additive attention mask, random but with every key of `rows` at -inf."""
    m = torch.randn(lq, lk)
    m[rows] = float("-inf")
    return m


def select_scatter_fn(a, b):
    c = a.clone()
    c[1] = b  # select_scatter along dim 0
    c[:, 2] = b[:4] * 2  # along dim 1
    return c + 1


def slice_scatter_fn(a, b):
    c = a.clone()
    c[1:3] = b[:2]
    c[:, -2:] = b[:4, :2] * 2
    return c * 3


CASES = {
    "add_sub_alpha": (lambda a, b: torch.add(a, b, alpha=2) - torch.sub(b, a, alpha=0.5),
                      [x34, x34]),
    "scalars": (lambda a: (a + 1.5) * 3 - 2 / (a * a + 1) + (1 - a) / 4, [x34]),
    "rsub_div": (lambda a, b: torch.rsub(a, b) / (b * b + 1), [x34, x34]),
    "broadcast": (lambda a, b: a * b + a, [lambda: torch.randn(2, 3, 4), lambda: torch.randn(4)]),
    "unary": (lambda a: torch.tanh(a) + torch.sigmoid(a) + torch.exp(a) - torch.sqrt(a * a + 1)
              + torch.rsqrt(a * a + 1) + torch.erf(a) + F.silu(a) + F.hardswish(a)
              + F.hardsigmoid(a) - torch.neg(a) + torch.relu(a) + torch.reciprocal(a * a + 1),
              [x34]),
    "gelu": (lambda a: F.gelu(a) + F.gelu(a, approximate="tanh"), [x34]),
    "views": (lambda a: a.view(2, 6).t().reshape(3, 4).permute(1, 0).transpose(0, 1)
              .unsqueeze(0).squeeze(0).contiguous(), [x34]),
    "select_slice": (lambda a: a[1] + a[:, 1:3].mean(dim=1).mean() + a[-1, ::2].mean(), [x34]),
    "split_cat_stack": (lambda a: torch.cat(list(torch.split(a, 2, dim=1))[::-1], dim=1)
                        + torch.stack([a[0], a[1], a[2]], dim=0), [x34]),
    "split_with_sizes": (lambda a: torch.cat(a.split([1, 3], dim=1)[::-1], dim=1), [x34]),
    "expand_clone": (lambda a: a[:, :1].expand(3, 4).clone() + a, [x34]),
    "mm_bmm_mv": (lambda a, b, c: torch.mm(a, b) + torch.bmm(a.unsqueeze(0), b.unsqueeze(0))[0]
                  + torch.mv(a, c).unsqueeze(1), [x34, lambda: torch.randn(4, 5),
                                                  lambda: torch.randn(4)]),
    "addmm_beta_alpha": (lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
                         [lambda: torch.randn(5), x34, lambda: torch.randn(4, 5)]),
    "matmul_linear": (lambda a, b, w: torch.matmul(a, b)[..., :5] + F.linear(a, w),
                      [lambda: torch.randn(2, 3, 4), lambda: torch.randn(4, 6),
                       lambda: torch.randn(5, 4)]),
    "softmax_dims": (lambda a: torch.softmax(a, dim=0) + torch.softmax(a, dim=-1), [x34]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (3, 4)) + F.layer_norm(a, (4,), w, b),
                   [lambda: torch.randn(2, 3, 4), lambda: torch.randn(4), lambda: torch.randn(4)]),
    "mean_dims": (lambda a: a.mean(dim=(0, 2), keepdim=True) + a.mean(),
                  [lambda: torch.randn(2, 3, 4)]),
    "sum_dims": (lambda a: a.sum(dim=(0, 2), keepdim=True) + a.sum() + a.sum(-1).sum(0),
                 [lambda: torch.randn(2, 3, 4)]),
    "conv_groups_stride": (lambda a, w: F.conv2d(a, w, stride=2, padding=1, groups=2),
                           [lambda: torch.randn(1, 4, 9, 9), lambda: torch.randn(6, 2, 3, 3)]),
    # Comparisons feed a where or a masked_fill (a converted graph returns no
    # bool tensor of its own here); NaN, infinities and signed zeros among the
    # values, each comparison's result one bit of the output.
    "compare_float": (lambda a, b: sum(torch.where(c, torch.full((3, 4), 2.0**k),
                                                   torch.zeros(3, 4))
                                       for k, c in enumerate([a < b, a >= 0.5, a == b, a != -0.0,
                                                              a.gt(b[0]), a.le(0), a.ge(b),
                                                              a.eq(float("inf"))]))
                      + torch.zeros(3, 4).masked_fill(a.ne(b), 1.0),
                      [lambda: special_values(3, 4), lambda: special_values(3, 4)]),
    "compare_int_and_bool": (lambda i, a: torch.where((i > 2) & (i != 4), a, -a)
                             + torch.where((i == 3).eq(i < 0), a, 2 * a),
                             [lambda: torch.randint(-5, 5, (3, 4)), x34]),
    "compare_bf16": (lambda a, b: torch.where(a > b, a, b) * 2,
                     [lambda: torch.randn(4, 5).bfloat16(), lambda: torch.randn(5).bfloat16()]),
    "causal_mask_of_a_buffer_slice": (  # nanoGPT: tril[:, :, :t, :t] == 0
        lambda a: a.masked_fill(torch.tril(torch.ones(8, 8))[None, None, :5, :5] == 0,
                                float("-inf")).softmax(-1), [lambda: torch.randn(1, 2, 5, 5)]),
    "conv1d_groups_stride_dilation": (
        lambda a, w, b: F.conv1d(a, w, b, stride=2, padding=3, dilation=2, groups=2),
        [lambda: torch.randn(2, 4, 13), lambda: torch.randn(6, 2, 3), lambda: torch.randn(6)]),
    "conv1d_depthwise_causal": (  # as Mamba's and wav2vec's: padded, then cut to length
        lambda a, w: F.conv1d(a, w, padding=3, groups=8)[..., :11],
        [lambda: torch.randn(1, 8, 11), lambda: torch.randn(8, 1, 4)]),
    "conv_bias_dilation": (lambda a, w, b: F.conv2d(a, w, b, padding=2, dilation=2),
                           [lambda: torch.randn(2, 3, 8, 8), lambda: torch.randn(4, 3, 3, 3),
                            lambda: torch.randn(4)]),
    "adaptive_avg_pool": (lambda a: F.adaptive_avg_pool2d(a, 1) + F.adaptive_avg_pool2d(a, 6)
                          + F.adaptive_avg_pool2d(a, (2, 3)).mean(),
                          [lambda: torch.randn(2, 3, 6, 6)]),
    "adaptive_avg_pool_windows": (lambda a: F.adaptive_avg_pool2d(a * 2, (3, 2)),
                                  [lambda: torch.randn(2, 3, 6, 4)]),
    "batch_norm_eval": (lambda a, m, v, w, b: F.batch_norm(a, m, v, w, b),
                        [lambda: torch.randn(2, 3, 4, 4), lambda: torch.randn(3),
                         lambda: torch.rand(3) + 0.5, lambda: torch.randn(3),
                         lambda: torch.randn(3)]),
    "inplace_on_intermediate": (lambda a: torch.relu_(a * 2).add_(1), [x34]),
    "sdpa_cross": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), sdpa_qkv()),
    "sdpa_scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3) * 2,
                   sdpa_qkv(1, 2, 6, 6, 16)),
    "sdpa_additive_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                           sdpa_qkv() + [lambda: torch.randn(5, 7)]),
    "sdpa_mask_per_batch": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                            sdpa_qkv() + [lambda: torch.randn(2, 1, 1, 7)]),
    # Row 0 of every batch sees no key: torch's CPU kernel gives zeros there.
    "sdpa_fully_masked_row": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v,
                                                                               attn_mask=m),
                              sdpa_qkv() + [lambda: masked_rows(5, 7, [0])]),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    sdpa_qkv(lq=6, lk=6)),
    # More keys than queries: torch's tril is aligned to the top left.
    "sdpa_causal_more_keys": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                            is_causal=True),
                              sdpa_qkv(lq=3, lk=7)),
    "sdpa_grouped_query": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                         enable_gqa=True),
                           [lambda: torch.randn(2, 6, 5, 8), lambda: torch.randn(2, 2, 7, 8),
                            lambda: torch.randn(2, 2, 7, 8)]),
    "pow": (lambda a: a.pow(2) + a ** 3 + (a * a + 1).pow(0.5) + (a * a + 1) ** -0.5
            + (a * a + 1).pow(-1), [x34]),
    "to_dtype": (lambda a, i, m: a.to(torch.float16).to(torch.float32)
                 + a.to(torch.bfloat16).to(torch.float32) + i.to(torch.float32)
                 + m.to(torch.float32),
                 [x34, lambda: torch.randint(-5, 5, (3, 4)), lambda: torch.rand(3, 4) > 0.5]),
    # torch.argmax: the first maximum, a NaN counting as the maximum; over
    # the last dim, another one (a strided view), none (flattened), keepdim;
    # ties among integers take the first.
    "argmax": (lambda a, i, b: (a.argmax(-1), a.argmax(0, keepdim=True), a.argmax(),
                                torch.argmax(a * 2, dim=1, keepdim=True), i.argmax(1),
                                a.argmax(-1) + i.argmax(1), b.argmax(-1), b.argmax(0)),
               [lambda: special_values(3, 4, 5), lambda: torch.randint(-2, 2, (4, 5)),
                lambda: torch.tensor([[1.0, float("nan"), 5.0, 2.0], [3.0, 1.0, 7.0, float("nan")],
                                      [0.0, 7.0, float("nan"), 7.0]])]),
    # x.to(bool) is x != 0: NaN True, -0.0 False; an int64 padding mask as HF
    # makes one; the bools feed a where (no bool output of the graph's own).
    "to_bool": (lambda a, i, h: torch.where(a.to(torch.bool), 1.0, 0.0)
                + torch.where(i.to(torch.bool), 2.0, 0.0) + torch.where(h.bool(), 4.0, 0.0),
                [lambda: special_values(3, 4), lambda: torch.randint(0, 2, (3, 4)),
                 lambda: special_values(3, 4).bfloat16()]),
    "embedding": (lambda w, i: F.embedding(i, w) * 2,
                  [lambda: torch.randn(10, 4), lambda: torch.randint(0, 10, (2, 3))]),
    "as_strided_view": (lambda a: torch.as_strided(a + 1, (1, 12, 1, 1), (12, 1, 12, 12)) * 2,
                        [x34]),
    "as_strided_transpose": (lambda a: torch.as_strided(a * 2, (4, 3), (1, 4)) + 1, [x34]),
    # Rotary embeddings' angles: cos and sin of position * frequency.
    "cos_sin": (lambda a: torch.cos(a * 40) * torch.sin(a * 3) + torch.sin(a), [x34]),
    # A bool mask made additive, as transformers and MultiheadAttention build it.
    "where": (lambda a, m: torch.where(m, a, torch.full_like(a, float("-inf"))).softmax(-1)
              + torch.where(m[0], torch.zeros(4), a),
              [x34, lambda: torch.cat([torch.ones(3, 1, dtype=torch.bool),
                                       torch.rand(3, 3) > 0.3], 1)]),  # no row all -inf
    # Cache positions: integer add and sub, exact past 2**24 (f32 is not).
    "integer_add": (lambda p, q: ((p + 3) - (q - 2**40)) + p + 1,
                    [lambda: torch.randint(2**30, 2**40, (3, 4)),
                     lambda: torch.randint(0, 2**40, (4,))]),
    # q, k and v as views of one [B, L, 3, H, D] projection, read through
    # their strides by the heads-first sdpa.
    "sdpa_strided_views": (lambda x: F.scaled_dot_product_attention(
        *(x.unflatten(-1, (3, 4, 8)).permute(2, 0, 3, 1, 4).unbind(0)), is_causal=True),
        [lambda: torch.randn(2, 6, 96)]),
    "select_scatter": (select_scatter_fn, [lambda: torch.randn(4, 5), lambda: torch.randn(5)]),
    "slice_scatter": (slice_scatter_fn, [lambda: torch.randn(4, 5), lambda: torch.randn(5, 5)]),
}


@pytest.mark.parametrize("mode", ["eager", "reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_torch(name, mode):
    fn, makers = CASES[name]
    backend = run(fn, [m() for m in makers], mode)
    c = sinkgraph.counters(backend)
    assert c["fallback_nodes"] == 0, sinkgraph.explain(backend)
    if mode == "reduce-overhead":
        assert c["captured"] >= 1 and c["replayed"] > c["captured"], c


# ---- what a capability check leaves to torch -------------------------------------------------

FLASH = "aten._scaled_dot_product_flash_attention_for_cpu.default"
FALLBACK_CASES = {
    "pow_other_exponent": (lambda a: (a * a + 1).pow(1.7) * 2, [x34],
                           ["aten.pow.Tensor_Scalar"]),
    "as_strided_overlapping": (lambda a: torch.as_strided(a + 1, (3, 3), (1, 1)) * 2, [x34],
                               ["aten.as_strided.default"]),
    "as_strided_fewer_elements": (lambda a: torch.as_strided(a + 1, (2, 2), (4, 1)) * 2, [x34],
                                  ["aten.as_strided.default"]),
    "adaptive_avg_pool_uneven_windows": (lambda a: F.adaptive_avg_pool2d(a * 2, 2) + 1,
                                         [lambda: torch.randn(1, 3, 5, 5)],
                                         ["aten._adaptive_avg_pool2d.default"]),
    "conv_transpose": (lambda a, w: F.conv_transpose2d(a * 2, w) + 1,
                       [lambda: torch.randn(1, 4, 5, 5), lambda: torch.randn(4, 2, 3, 3)],
                       ["aten.convolution.default"]),
    "mixed_dtypes": (lambda a, b: (a * 2) + b.to(torch.float16), [x34, x34],
                     ["aten.add.Tensor"]),
    # Only integer add and sub are exact in sinkgraph; an integer product stays in torch.
    "integer_mul": (lambda a, i: a * 2 + (i * 3).to(torch.float32),
                    [x34, lambda: torch.randint(-5, 5, (3, 4))], ["aten.mul.Tensor"]),
    # A graph input: torch's own tensor, with its own strides (see the xfail below).
    "as_strided_of_a_transposed_input": (lambda a: torch.as_strided(a.t(), (12,), (1,)) * 2,
                                         [x34], ["aten.as_strided.default"]),
}


@pytest.mark.parametrize("name", sorted(FALLBACK_CASES))
def test_a_call_a_capability_check_refuses_runs_in_torch(name):
    fn, makers, fallback = FALLBACK_CASES[name]
    backend = run(fn, [m() for m in makers], "max-autotune")
    assert fallback_targets(backend) == fallback, sinkgraph.explain(backend)
    assert "fallback: " in sinkgraph.explain(backend)


def test_a_fallback_as_strided_of_a_strided_region_output():
    # A region output reaches torch with the strides torch's meta gives it
    # (Note [Output strides] in graph.py), so torch code reading its storage
    # order directly agrees with eager.
    backend = run(lambda a: torch.as_strided((a + 1).t(), (3, 3), (1, 1)) * 2,
                  [torch.randn(3, 4)], "max-autotune")
    assert fallback_targets(backend) == ["aten.as_strided.default"]


def test_max_pool2d():
    # The int64 indices output is unused: the pool runs in sinkgraph.
    backend = run(lambda a: F.max_pool2d(a * 2, 3, 2, 1, ceil_mode=True) + 1,
                  [torch.randn(1, 4, 9, 9)], "max-autotune")
    assert fallback_targets(backend) == [], sinkgraph.explain(backend)


def special_values(*shape):
    """Random values with NaN, -0.0, +-inf and the clamps' corners (-3, 3) among them."""
    x = torch.randn(*shape)
    flat = x.view(-1)
    specials = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), -3.0, 3.0, 0.0])
    for i in range(0, flat.numel(), 5):
        flat[i] = specials[(i // 5) % len(specials)]
    return x


class ConvAct(torch.nn.Module):
    """A convolution whose activation becomes its epilogue (ours or oneDNN's)."""

    def __init__(self, act, groups=1):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16 if groups == 1 else 8, 3, padding=1, groups=groups)
        self.act = act

    def forward(self, x):
        return self.act(self.conv(x))


# relu6 and hardtanh have no converter (they run in torch).
ACTIVATIONS = {
    "relu": torch.relu,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
}


# Note [A NaN passes through relu and clamp] (src/kernels/cpu/pointwise_math.h):
# relu and hardsigmoid once gave 0 for NaN, where torch gives NaN.
@pytest.mark.parametrize("mode", ["eager", "reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_nan_and_negative_zero_pass_through_activations_as_in_torch(name, mode):
    act = ACTIVATIONS[name]
    x = special_values(67)  # vector lanes and a tail
    cases = [
        (Fn(act), x),
        (Fn(lambda a: act(a * 2 + 1) + a), x),  # a fused elementwise chain
        (ConvAct(act), special_values(1, 8, 12, 12)),
        (ConvAct(act, groups=8), special_values(1, 8, 12, 12)),  # depthwise
    ]
    for model, inp in cases:
        torch._dynamo.reset()
        model.eval()
        opt = torch.compile(model, backend=make_backend(mode))
        with torch.no_grad():
            want = model(inp)
            for _ in range(2):
                got = opt(inp)
                torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
                assert torch.equal(torch.isnan(got), torch.isnan(want))
                zeros = want == 0
                assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros])), (
                    f"{name}: the sign of a zero differs from torch's")


class MaskedEncoder(torch.nn.Module):
    """The fused encoder-layer kernel with a padding mask, after a converted linear."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x, mask):
        return self.layer(self.proj(x), src_key_padding_mask=mask)


class MaskedAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x, mask):
        h = self.proj(x)
        return self.mha(h, h, h, key_padding_mask=mask, need_weights=False)[0]


@pytest.mark.parametrize("cls", [MaskedEncoder, MaskedAttention])
def test_attention_with_a_padding_mask(cls):
    model = cls().eval()
    backend = make_backend("max-autotune")
    opt = torch.compile(model, backend=backend)
    x = torch.randn(2, 7, 16)
    mask = torch.tensor([[False] * 5 + [True] * 2, [False] * 7])
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(opt(x, mask), model(x, mask), rtol=RTOL, atol=ATOL)
    text = sinkgraph.explain(backend)
    if cls is MaskedEncoder:
        # The fused encoder-layer kernel with a mask stays whole in torch.
        assert "attention takes none" in text, text
    else:
        # MultiheadAttention's general path: torch turns the bool mask into an
        # additive one (where, in sinkgraph too), and the attention runs in
        # sinkgraph as sdpa_mask.
        assert FLASH not in fallback_targets(backend), text
        assert "aten.where.self" not in fallback_targets(backend), text


def test_slice_scatter_with_a_step_runs_in_torch():
    def fn(a, b):
        c = a * 1
        c[:, ::2] = b
        return c + 1

    backend = run(fn, [torch.randn(3, 6), torch.randn(3, 3)], "max-autotune")
    targets = fallback_targets(backend)
    assert targets and all("slice_scatter" in t or "copy" in t for t in targets), \
        sinkgraph.explain(backend)


def test_max_pool_indices_stay_with_torch():
    backend = run(lambda a: F.max_pool2d(a * 2, 2, return_indices=True),
                  [torch.randn(1, 2, 6, 6)], "max-autotune")
    assert fallback_targets(backend) == ["aten.max_pool2d_with_indices.default"]


# ---- dynamic shapes: the size arithmetic stays in the region --------------------------------


def test_size_arithmetic_of_a_dynamic_batch_runs_in_the_region():
    def fn(x):
        n = x.shape[0]
        return (x.reshape(n * 2, -1) * 2).view(n, 2, -1).sum(1) + x[:, : x.shape[1] // 2].mean()

    torch._dynamo.reset()  # Dynamo's automatic-dynamic memory of Fn.forward from other tests
    model = Fn(fn).eval()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for b in (2, 3, 4, 3):
            x = torch.randn(b, 6)
            torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)
    c = sinkgraph.counters(backend)
    assert c["fallback_nodes"] == 0, sinkgraph.explain(backend)
    # One dynamic graph serves 3 and 4 (one graph key per size), beside the static one for 2.
    assert c["graphs_compiled"] == 2, sinkgraph.explain(backend)
    ops = {str(n.target) for g in backend.compiled for r in g.regions
           for n in r.runner.graph.nodes if n.op == "call_function"}
    assert any("mul" in o and not o.startswith("aten") for o in ops) or any(
        "sym_size" in o for o in ops), ops


# ---- writes --------------------------------------------------------------------------------


def test_in_place_write_to_an_input_reaches_the_caller():
    model = Fn(lambda a, b: a.add_(b)).eval()
    opt = torch.compile(model, backend=make_backend("reduce-overhead"))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    want = a + b
    with torch.no_grad():
        opt(a, b)
    torch.testing.assert_close(a, want)


def test_a_write_through_a_view_is_the_write_torch_makes():
    # torch views x[:, :4] as [4, 2, 2]; AOTAutograd makes the write through
    # the view functional, so sinkgraph's copies of strided values cannot lose it.
    def fn(x):
        x[:, :4].view(4, 2, 2).add_(1)
        return x * 1

    model = Fn(fn).eval()
    opt = torch.compile(model, backend=make_backend("reduce-overhead"))
    x = torch.randn(4, 6)
    mine, ref = x.clone(), x.clone()
    with torch.no_grad():
        got, want = opt(mine), model(ref)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, ref)


def test_a_write_through_select_reaches_a_buffer():
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.zeros(4, 3))

        def forward(self, x, pos):
            self.c[pos] = x
            return self.c[: pos + 1] * 2

    model, ref = Cache(), Cache()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend)
    with torch.no_grad():
        for pos in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(opt(x, pos), ref(x, pos))
    torch.testing.assert_close(model.c, ref.c)
    assert sinkgraph.counters(backend)["fallback_nodes"] == 0, sinkgraph.explain(backend)


def test_a_write_of_another_dtype_into_a_buffer_runs_in_torch():
    class Half(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("h", torch.zeros(3, 4, dtype=torch.float16))

        def forward(self, x):
            self.h.copy_(x * 2)  # a conversion: sinkgraph has no cast
            return x + 1

    model, ref = Half(), Half()
    backend = make_backend("reduce-overhead")
    opt = torch.compile(model, backend=backend)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), ref(x))
    torch.testing.assert_close(model.h, ref.h)
    assert "sinkgraph does not convert dtypes" in sinkgraph.explain(backend)


# ---- the registry --------------------------------------------------------------------------


def test_every_registered_converter_names_an_aten_overload_or_size_arithmetic():
    from sinkgraph import converters
    names = converters.registered()
    assert len(names) >= 60
    size_ops = {str(o) for o in (operator.add, operator.sub, operator.mul, operator.floordiv,
                                 operator.mod, operator.neg, torch.sym_max, torch.sym_min)}
    assert all(n.startswith("aten.") or n in size_ops for n in names), names


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_an_embedding_id_out_of_range_is_one_clear_error_and_the_module_recovers(mode):
    backend = make_backend(mode)
    opt = torch.compile(Fn(lambda w, i: F.embedding(i, w) * 2), backend=backend)
    w = torch.randn(10, 4)
    with torch.no_grad():
        opt(w, torch.tensor([1, 2]))
        with pytest.raises(Exception, match="token id 12 .* out of range .* 10 rows"):
            opt(w, torch.tensor([1, 12]))
        ids = torch.tensor([3, 9])
        torch.testing.assert_close(opt(w, ids), F.embedding(ids, w) * 2)
