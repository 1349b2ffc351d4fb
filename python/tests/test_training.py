"""Training through AOTAutograd's forward and backward compilers."""
import copy

import pytest
import torch

import sinkgraph
from conftest import make_backend


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.bn(self.fc1(x))))


@pytest.mark.parametrize("mode", ["eager", "reduce-overhead"])
def test_gradients_and_batch_norm_statistics_equal_eager(mode):
    torch._dynamo.reset()
    ref = Net().train()
    model = copy.deepcopy(ref)
    backend = make_backend(mode)
    opt = torch.compile(model, backend=backend)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_sg = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(6, 8)
        for m, o, f in ((ref, opt_ref, ref), (model, opt_sg, opt)):
            o.zero_grad()
            loss = f(x).square().mean()
            loss.backward()
            o.step()
        for (name, p), q in zip(ref.named_parameters(), model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=f"step {step}: {name}")
        torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean)
        torch.testing.assert_close(model.bn.running_var, ref.bn.running_var)
    c = sinkgraph.counters(backend)
    assert c["graphs_compiled"] == 2  # a forward and a backward graph
    if mode == "reduce-overhead":
        assert c["captured"] >= 1 and c["replayed"] >= 3


def test_max_autotune_refuses_training_with_one_clear_error():
    torch._dynamo.reset()
    model = Net().train()
    opt = torch.compile(model, backend=make_backend("max-autotune"))
    with pytest.raises(Exception, match="max-autotune compiles inference graphs only"):
        opt(torch.randn(4, 8)).sum().backward()
