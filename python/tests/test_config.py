"""CompilerConfig: the C++ options by name, with clear errors."""

import pytest
import torch

import sinkgraph


def test_defaults_match_the_cxx_options():
    c = sinkgraph.CompilerConfig()
    assert c.mode == "max-autotune"  # TorchAir's default
    assert c.capture_limit == 64
    assert c.frozen_parameter is False
    assert c.recompile_limit == 8
    assert c.output_views is False
    assert "capture_error_mode" in sinkgraph.CompilerConfig.option_names()


def test_set_and_copy():
    c = sinkgraph.CompilerConfig()
    c.mode = "reduce-overhead"
    c.capture_limit = 4
    d = c.copy()
    c.capture_limit = 5
    assert d.mode == "reduce-overhead" and d.capture_limit == 4


def test_unknown_option_lists_the_valid_names():
    c = sinkgraph.CompilerConfig()
    with pytest.raises(AttributeError, match="capture_limit"):
        c.capture_limt = 4


@pytest.mark.parametrize("name,value,match", [
    ("mode", "fast", "reduce-overhead"),
    ("capture_limit", 0, ">= 1"),
    ("capture_limit", "4", "integer"),
    ("frozen_parameter", 1, "True or False"),
    ("capture_error_mode", "loose", "thread_local"),
])
def test_bad_values_raise_with_the_choices(name, value, match):
    c = sinkgraph.CompilerConfig()
    with pytest.raises(ValueError, match=match):
        setattr(c, name, value)


def test_get_backend_rejects_other_configs():
    with pytest.raises(TypeError, match="CompilerConfig"):
        sinkgraph.get_backend(compiler_config={"mode": "eager"})


def test_backend_has_the_torch_compile_contract():
    # backend(gm, example_inputs) -> callable, as torch.compile calls it.
    import torch.fx
    config = sinkgraph.CompilerConfig()
    config.mode = "reduce-overhead"
    backend = sinkgraph.get_backend(compiler_config=config)
    gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    x = torch.randn(2, 4)
    with torch.no_grad():
        fn = backend(gm, [x])
        for _ in range(3):
            out = fn(x)
            out = out[0] if isinstance(out, (list, tuple)) else out
            torch.testing.assert_close(out, gm(x))
    c = sinkgraph.counters(backend)
    assert c["captured"] == 1 and c["replayed"] == 3  # the capturing call replays too
