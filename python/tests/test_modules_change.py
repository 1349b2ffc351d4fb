"""Modules changed between calls: the next call reflects the change, never a stale value."""
import pytest
import torch

import sinkgraph
from conftest import make_backend


def _net():
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 4)).eval()


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_weights_written_in_place_are_seen_without_recapture(mode):
    model = _net()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        model[0].weight.mul_(0.5)
        model[3].bias.add_(1.0)
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    assert sinkgraph.counters(backend)["captured"] == 1


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_reassigned_weight_recaptures_and_is_counted(mode):
    model = _net()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        model[0].weight = torch.nn.Parameter(torch.randn(8, 8))
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["recapture_due_to_parameter_change"] >= 1, c


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_weight_given_new_memory_under_the_same_object_is_seen(mode):
    # `param.data = t` keeps the Parameter object (Dynamo's guards still pass)
    # but moves its memory: the region's cached binding of that argument must
    # not keep reading the old memory (Note [Torch arguments in one call]).
    model = _net()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        weight = model[0].weight
        weight.data = torch.randn(8, 8)
        assert model[0].weight is weight
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    c = sinkgraph.counters(backend)
    assert c["recapture_due_to_parameter_change"] >= 1, c


def test_frozen_parameter_refuses_a_weight_written_in_place():
    model = _net()
    opt = torch.compile(model, backend=make_backend("reduce-overhead", frozen_parameter=True))
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        model[0].weight.mul_(0.5)
        with pytest.raises(sinkgraph.Error, match="frozen"):
            opt(x)


def test_train_and_eval_switch():
    model = _net()
    opt = torch.compile(model, backend=make_backend("reduce-overhead"))
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
        model.train()
        ref_model = _net()
        ref_model.load_state_dict(model.state_dict())
        ref_model.train()
        torch.testing.assert_close(opt(x), ref_model(x), rtol=1e-3, atol=1e-4)
        model.eval()
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)


def test_outputs_are_not_overwritten_by_later_calls():
    model = _net()
    opt = torch.compile(model, backend=make_backend("reduce-overhead"))
    with torch.no_grad():
        xs = [torch.randn(3, 8) for _ in range(4)]
        ys = [opt(x) for x in xs]
        for x, y in zip(xs, ys):
            torch.testing.assert_close(y, model(x), rtol=1e-3, atol=1e-4)


# Issue 36, item 6: tensors the model reads that are neither arguments nor
# registered parameters or buffers. Dynamo lifts a plain tensor attribute and a
# global tensor into graph inputs (it guards on them), so nothing is baked in
# at capture: a write in place and a reassignment are both seen.
_OFFSET = torch.randn(8)


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = torch.randn(8)  # a plain attribute: not a parameter, not a buffer

    def forward(self, x):
        return self.lin(x) * self.scale + _OFFSET


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_a_plain_tensor_attribute_and_a_global_tensor_are_read_every_call(mode):
    global _OFFSET
    model = _Scaled().eval()
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
        model.scale.mul_(3.0)
        _OFFSET.add_(1.0)
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
        model.scale = torch.randn(8)
        _OFFSET = torch.randn(8)
        torch.testing.assert_close(opt(x), model(x), rtol=1e-3, atol=1e-4)
    assert sinkgraph.counters(backend)["replayed"] >= 3
