"""Bad input: one clear exception naming what and where; the module keeps working."""
import pytest
import torch

import sinkgraph
from conftest import make_backend


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4)).eval()


def test_a_wrong_shaped_call_raises_and_the_module_keeps_working():
    model = _mlp()
    opt = torch.compile(model, backend=make_backend("reduce-overhead"))
    x = torch.randn(2, 8)
    with torch.no_grad():
        opt(x)
        with pytest.raises(Exception, match=r"shape|size|mat1"):
            opt(torch.randn(2, 9))
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)


def test_complex_numbers_stay_with_torch():
    def f(x, w):
        return torch.view_as_real(torch.view_as_complex(x) * 2).relu() @ w

    opt = torch.compile(f, backend=make_backend("reduce-overhead"))
    x, w = torch.randn(4, 2), torch.randn(2, 3)
    torch.testing.assert_close(opt(x, w), f(x, w), rtol=1e-3, atol=1e-4)


def test_a_tensor_on_another_device_is_named():
    meta = torch.randn(2, 8, device="meta")
    opt = torch.compile(lambda x: x.relu() + 1, backend=make_backend("reduce-overhead"))
    with pytest.raises(Exception, match="input 0 is on meta.*CPU"):
        opt(meta)


def test_get_backend_rejects_torch_compile_kwargs():
    backend = make_backend("eager")
    with pytest.raises(TypeError, match="CompilerConfig"):
        backend(torch.fx.symbolic_trace(_mlp()), [torch.randn(1, 8)], mode="max-autotune")
