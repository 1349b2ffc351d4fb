"""Guards, parameter updates, clear errors: one test per guard."""

import pytest
import torch

import sinkgraph
from conftest import make_backend


def compiled(model, mode="reduce-overhead", **options):
    return sinkgraph.compile(model.eval(), backend=make_backend(mode, **options))


def traces(opt):
    return opt.explain().count("\ntrace ")


class Pointwise(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2 + 1)


def test_dtype_change_retraces():
    model = Pointwise()
    opt = compiled(model)
    with torch.no_grad():
        x = torch.randn(2, 8)
        torch.testing.assert_close(opt(x), model(x))
        xb = x.to(torch.bfloat16)
        out = opt(xb)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, model(xb))
        with pytest.raises(sinkgraph.Error, match="no sinkgraph dtype"):
            opt(x.double())  # float64 is refused, never silently converted
    assert "dtype" in opt.explain()


def test_non_contiguous_input_retraces_and_is_correct():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    with torch.no_grad():
        x = torch.randn(2, 8)
        torch.testing.assert_close(opt(x), model(x))
        xt = torch.randn(8, 2).t()  # same shape, other strides
        torch.testing.assert_close(opt(xt), model(xt))
    assert "strides" in opt.explain()
    assert traces(opt) == 2


def test_in_place_parameter_update_is_seen_without_retrace():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        opt(x)
        model.weight.mul_(2)
        model.bias.add_(1)
        torch.testing.assert_close(opt(x), model(x))
    c = sinkgraph.counters(opt)
    assert c["captured"] == 1 and c["replayed"] >= 2
    assert traces(opt) == 1


def test_replaced_parameter_recaptures():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        opt(x)
        model.weight = torch.nn.Parameter(torch.randn(4, 8))
        torch.testing.assert_close(opt(x), model(x))
    assert sinkgraph.counters(opt)["recapture_due_to_parameter_change"] == 1


def test_replaced_parameter_under_frozen_parameter_raises():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model, frozen_parameter=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt(x)
        model.weight = torch.nn.Parameter(torch.randn(4, 8))
        with pytest.raises(sinkgraph.Error, match="frozen_parameter"):
            opt(x)


def test_train_mode_retraces():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    opt = compiled(model)
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
        model.train()
        out = opt(x)  # dropout now drops: a new trace, not the eval graph
        assert (out == 0).any()
    assert "training" in opt.explain()


def test_grad_mode_with_trainable_parameters_raises():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    with pytest.raises(sinkgraph.Error, match="no_grad"):
        opt(torch.randn(2, 8))


def test_grad_mode_change_retraces():
    model = torch.nn.Linear(8, 4).requires_grad_(False)
    opt = compiled(model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        opt(x)
    torch.testing.assert_close(opt(x), model(x))
    assert "grad mode" in opt.explain()


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


def test_python_attribute_read_in_forward_retraces():
    model = Scaled()
    opt = compiled(model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
        model.scale = 3.0
        torch.testing.assert_close(opt(x), model(x))
    assert "scale" in opt.explain()


def test_new_batch_size_retraces_and_reuses_old_graphs():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    with torch.no_grad():
        for b in (1, 2, 1, 2):
            x = torch.randn(b, 8)
            torch.testing.assert_close(opt(x), model(x))
    assert traces(opt) == 2


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def test_data_dependent_control_flow_is_a_clear_error():
    opt = compiled(Branchy())
    with torch.no_grad(), pytest.raises(sinkgraph.Error, match="data-dependent"):
        opt(torch.randn(4))


def test_recompile_limit_falls_back_to_eager():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model, recompile_limit=2)
    with torch.no_grad(), pytest.warns(UserWarning, match="recompile_limit"):
        for b in (1, 2, 3):
            x = torch.randn(b, 8)
            torch.testing.assert_close(opt(x), model(x))


def test_output_views_are_overwritten_by_the_next_replay():
    # The documented trap: with output_views=True an output is the graph's
    # memory, valid until the next call.
    model = torch.nn.Linear(8, 4)
    opt = compiled(model, output_views=True)
    with torch.no_grad():
        a, b = torch.randn(2, 8), torch.randn(2, 8)
        opt(a)
        y1 = opt(a)
        want1 = model(a).clone()
        torch.testing.assert_close(y1, want1)
        opt(b)
        assert not torch.equal(y1, want1)  # overwritten in place


def test_default_outputs_are_copies():
    model = torch.nn.Linear(8, 4)
    opt = compiled(model)
    with torch.no_grad():
        a, b = torch.randn(2, 8), torch.randn(2, 8)
        opt(a)
        y1 = opt(a)
        want1 = model(a)
        opt(b)
        torch.testing.assert_close(y1, want1)
