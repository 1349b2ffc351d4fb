"""Odd tensors through the backend (issue 36, item 2): each call gives torch
eager's result or one clear exception, never a wrong value and never a crash.

Every case is called twice on the same compiled function (the capture, then a
replay), then once more with new values of the same kind, so a replay that
read a stale or wrongly strided buffer shows up as a wrong value."""
import pytest
import torch

import sinkgraph
from conftest import MODES, make_backend

RTOL, ATOL = 1e-3, 1e-4


def _mlp(dtype=torch.float32):
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 16)).eval().to(dtype)


def _check(fn, make_args, mode, rtol=RTOL, atol=ATOL, dynamic=None):
    """Compiles fn, calls it on make_args(seed) for seeds 0, 0, 1 and compares
    every output with fn's own eager output on the same arguments."""
    backend = make_backend(mode)
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        for seed in (0, 0, 1):
            args = make_args(seed)
            want = fn(*make_args(seed))
            got = compiled(*args)
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{mode}, seed {seed}: {m}")
    # Not a trivial pass: sinkgraph ran the graph, and later calls replayed it.
    c = sinkgraph.counters(backend)
    assert c["graphs_compiled"] >= 1 and backend.compiled[0].regions, sinkgraph.explain(backend)
    if mode != "eager":
        assert c["replayed"] > c["captured"] >= 1, sinkgraph.explain(backend)
    return backend


def _randn(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "offset"])
def test_non_contiguous_inputs(mode, layout):
    model = _mlp()

    def make(seed):
        if layout == "transposed":
            return (_randn(seed, 16, 6).t(),)
        if layout == "sliced":
            return (_randn(seed, 6, 40)[:, 3:35:2],)
        if layout == "expanded":
            return (_randn(seed, 1, 16).expand(5, 16),)
        return (_randn(seed, 7 * 16)[16:].view(6, 16),)  # a view at an offset

    _check(model, make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_channels_last_images_and_module(mode):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()
    model = model.to(memory_format=torch.channels_last)

    def make(seed):
        return (_randn(seed, 2, 3, 12, 12).contiguous(memory_format=torch.channels_last),)

    _check(model, make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_zero_size_batch(mode):
    model = _mlp()
    _check(model, lambda seed: (_randn(seed, 0, 16),), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_modules(mode, dtype):
    model = _mlp(dtype)
    # Sums of 16 and 32 products rounded to 8 (bf16) or 11 (f16) bits.
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=5e-3, atol=5e-3)
    _check(model, lambda seed: (_randn(seed, 4, 16, dtype=dtype),), mode, **tol)


@pytest.mark.parametrize("mode", MODES)
def test_int64_indices(mode):
    emb = torch.nn.Embedding(50, 8).eval()
    table = _randn(9, 50, 8)

    def fn(ids, rows):
        return emb(ids).sum(-1) + torch.index_select(table, 0, rows).mean(-1)

    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, 50, (3, 4), generator=g),
                torch.randint(0, 50, (4,), generator=g))

    _check(fn, make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_inputs_that_alias_each_other(mode):
    def fn(a, b):
        return a * 2 + b.t()

    def make(seed):
        x = _randn(seed, 6, 6)
        return (x, x)  # the same tensor twice

    _check(fn, make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_an_input_that_is_a_parameter_of_the_module(mode):
    model = _mlp()
    compiled = torch.compile(model, backend=make_backend(mode))
    with torch.no_grad():
        # The first layer's weight [32, 16] fed as the input (32 rows of 16).
        w = model[0].weight
        torch.testing.assert_close(compiled(w), model(w), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(compiled(w), model(w), rtol=RTOL, atol=ATOL)
        w.mul_(0.5)  # the weight, and so the input, written in place
        torch.testing.assert_close(compiled(w), model(w), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("grad_mode", ["no_grad", "inference_mode"])
def test_inputs_that_require_grad(mode, grad_mode):
    model = _mlp()
    compiled = torch.compile(model, backend=make_backend(mode))
    ctx = torch.no_grad if grad_mode == "no_grad" else torch.inference_mode
    for seed in (0, 0, 1):
        x = _randn(seed, 4, 16).requires_grad_(True)
        with ctx():
            got = compiled(x)
            want = model(x)
        assert not got.requires_grad
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_wrong_dtype_after_compilation_is_eagers_result_or_a_clear_error(mode):
    model = _mlp()
    compiled = torch.compile(model, backend=make_backend(mode))
    with torch.no_grad():
        x = _randn(0, 4, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
        # f64 into an f32 module: torch refuses it (mat1 and mat2 dtypes differ);
        # the compiled module must refuse it too, not compute something.
        with pytest.raises(Exception) as eager_error:
            model(x.double())
        with pytest.raises(Exception) as compiled_error:
            compiled(x.double())
        assert "dtype" in str(compiled_error.value).lower() or \
            type(compiled_error.value) is type(eager_error.value), compiled_error.value
        # And it keeps giving right results afterwards.
        y = _randn(1, 4, 16)
        torch.testing.assert_close(compiled(y), model(y), rtol=RTOL, atol=ATOL)
