"""Several host threads on one compiled module, and an error in the middle of a sequence."""

import threading

import pytest
import torch

import sinkgraph
from conftest import make_backend


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_threads_share_one_compiled_module_and_each_gets_its_own_result(mode):
    model = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True).eval()
    opt = sinkgraph.compile(model, backend=make_backend(mode))
    inputs = [torch.randn(1, 6, 32) for _ in range(4)]
    with torch.no_grad():
        wants = [model(x) for x in inputs]
    errors = []

    def work(i):
        try:
            with torch.no_grad():
                for _ in range(40):
                    torch.testing.assert_close(opt(inputs[i]), wants[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert opt.explain().count("\ntrace ") == 1  # one trace, however the threads raced


def test_an_error_in_the_middle_of_a_sequence_leaves_the_module_working():
    model = torch.nn.Linear(8, 4).eval()
    opt = sinkgraph.compile(model, backend=make_backend("reduce-overhead"))
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
        with pytest.raises(RuntimeError):
            opt(x.double())  # torch's own dtype error while tracing, mid-sequence
        with pytest.raises(TypeError):
            opt(torch.randn(2, 8), torch.randn(1))  # wrong arity: forward() refuses it
        for _ in range(3):
            torch.testing.assert_close(opt(x), model(x))
    assert sinkgraph.counters(opt)["captured"] == 1


def test_a_compiled_module_dropped_after_calls_releases_cleanly():
    model = torch.nn.Linear(8, 4).eval()
    x = torch.randn(2, 8)
    for _ in range(3):
        opt = sinkgraph.compile(model, backend=make_backend("reduce-overhead", output_views=True))
        with torch.no_grad():
            y = opt(x)
        del opt  # the graph and its pool go; y keeps its memory alive through DLPack
        torch.testing.assert_close(y, model(x))
