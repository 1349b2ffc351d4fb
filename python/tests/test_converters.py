"""Each converter against torch: small modules, one ATen operator family each.

The model tests (test_models.py) cover the converters those models use; these
cover the rest of the registry's entries on their own, in reduce-overhead
(capture and replay) and max-autotune (no fallback allowed), and check that
no node fell back to libtorch.
"""

import pytest
import torch

import sinkgraph
from conftest import make_backend


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


x34 = lambda: torch.randn(3, 4)  # noqa: E731
CASES = {
    "add_sub_alpha": (lambda a, b: torch.add(a, b, alpha=2) - torch.sub(b, a, alpha=0.5),
                      [x34, x34]),
    "scalars": (lambda a: (a + 1.5) * 3 - 2 / (a * a + 1) + (1 - a) / 4, [x34]),
    "rsub_div": (lambda a, b: torch.rsub(a, b) / (b * b + 1), [x34, x34]),
    "broadcast": (lambda a, b: a * b + a, [lambda: torch.randn(2, 3, 4), lambda: torch.randn(4)]),
    "unary": (lambda a: torch.tanh(a) + torch.sigmoid(a) + torch.exp(a) - torch.sqrt(a * a + 1)
              + torch.rsqrt(a * a + 1) + torch.erf(a) + torch.nn.functional.silu(a)
              + torch.nn.functional.hardswish(a) + torch.nn.functional.hardsigmoid(a)
              - torch.neg(a) + torch.relu(a), [x34]),
    "gelu_tanh": (lambda a: torch.nn.functional.gelu(a, approximate="tanh"), [x34]),
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
    "matmul_3d": (lambda a, b: torch.matmul(a, b), [lambda: torch.randn(2, 3, 4),
                                                    lambda: torch.randn(4, 6)]),
    "softmax_dims": (lambda a: torch.softmax(a, dim=0) + torch.softmax(a, dim=-1), [x34]),
    "layer_norm_2d": (lambda a: torch.nn.functional.layer_norm(a, (3, 4)), [lambda: torch.randn(2, 3, 4)]),
    "mean_dims": (lambda a: a.mean(dim=(0, 2), keepdim=True) + a.mean(), [lambda: torch.randn(2, 3, 4)]),
    "conv_pool": (lambda a, w: torch.nn.functional.max_pool2d(
        torch.nn.functional.conv2d(a, w, stride=2, padding=1, groups=2), 3, 2, 1, ceil_mode=True),
        [lambda: torch.randn(1, 4, 9, 9), lambda: torch.randn(6, 2, 3, 3)]),
    "adaptive_avg_pool": (lambda a: torch.nn.functional.adaptive_avg_pool2d(a, 1),
                          [lambda: torch.randn(2, 3, 5, 5)]),
    "batch_norm_eval": (lambda a, m, v, w, b: torch.nn.functional.batch_norm(a, m, v, w, b),
                        [lambda: torch.randn(2, 3, 4, 4), lambda: torch.randn(3),
                         lambda: torch.rand(3) + 0.5, lambda: torch.randn(3), lambda: torch.randn(3)]),
    "inplace_on_intermediate": (lambda a: torch.relu_(a * 2).add_(1), [x34]),
}


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_torch(name, mode):
    fn, makers = CASES[name]
    model = Fn(fn).eval()
    opt = sinkgraph.compile(model, backend=make_backend(mode))
    args = [m() for m in makers]
    with torch.no_grad():
        want = model(*args)
        for _ in range(2):
            torch.testing.assert_close(opt(*args), want)
    assert sinkgraph.counters(opt)["fallback_nodes"] == 0, sinkgraph.explain(opt)


def test_in_place_write_to_an_input_reaches_the_caller():
    model = Fn(lambda a, b: a.add_(b)).eval()
    opt = sinkgraph.compile(model, backend=make_backend("reduce-overhead"))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    want = a + b
    with torch.no_grad():
        opt(a, b)
    torch.testing.assert_close(a, want)


def test_every_registered_converter_names_an_aten_overload():
    from sinkgraph import converters
    names = converters.registered()
    assert len(names) >= 60
    assert all(n.startswith("aten.") for n in names)


def test_a_write_through_a_view_sinkgraph_copies_is_refused():
    # torch views x[:, :4] as [4, 2, 2] (its strides allow it); sinkgraph's
    # view copies a strided tensor, so the in-place add would be lost: the
    # backend must say so instead of computing a wrong x.
    def fn(x):
        x[:, :4].view(4, 2, 2).add_(1)
        return x * 1

    opt = sinkgraph.compile(Fn(fn).eval(), backend=make_backend("reduce-overhead"))
    with torch.no_grad(), pytest.raises(sinkgraph.Error, match="writes in place through"):
        opt(torch.randn(4, 6))


def test_a_write_through_select_reaches_a_buffer():
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.zeros(4, 3))

        def forward(self, x, pos):
            self.c[pos] = x
            return self.c[: pos + 1] * 2

    model, ref = Cache(), Cache()
    opt = sinkgraph.compile(model, backend=make_backend("reduce-overhead"))
    with torch.no_grad():
        for pos in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(opt(x, pos), ref(x, pos))
    torch.testing.assert_close(model.c, ref.c)
