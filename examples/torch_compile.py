"""sinkgraph as a torch.compile backend: TorchAir's four lines, with sinkgraph's names.

Run after README command 1 (which installs sinkgraph into .venv):
  .venv/bin/python examples/torch_compile.py
"""

import torch

import sinkgraph

torch.manual_seed(0)
model = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
x = torch.randn(1, 10, 64)

config = sinkgraph.CompilerConfig()
config.mode = "reduce-overhead"
backend = sinkgraph.get_backend(compiler_config=config)
opt_model = torch.compile(model, backend=backend)
with torch.no_grad():
    for _ in range(3):
        y = opt_model(x)
    torch.testing.assert_close(y, model(x), rtol=1e-3, atol=1e-4)

# The same by name, as torch.compile finds any installed backend:
by_name = torch.compile(model, backend="sinkgraph", mode="max-autotune")
with torch.no_grad():
    torch.testing.assert_close(by_name(x), model(x), rtol=1e-3, atol=1e-4)

print("max |sinkgraph - torch| =", (y - model(x)).abs().max().item())
print(sinkgraph.counters(backend))
print(sinkgraph.explain(backend))
