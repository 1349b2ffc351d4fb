"""sinkgraph as a torch.compile backend: TorchAir's four lines, with sinkgraph's names.

Run after `cmake --build --preset release`:
  PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_compile.py
"""

import torch

import sinkgraph

torch.manual_seed(0)
model = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
x = torch.randn(1, 10, 64)

config = sinkgraph.CompilerConfig()
config.mode = "reduce-overhead"
backend = sinkgraph.get_backend(compiler_config=config)
opt_model = sinkgraph.compile(model, backend=backend)  # on torch >= 2.0 also: torch.compile
with torch.no_grad():
    for _ in range(3):
        y = opt_model(x)
    torch.testing.assert_close(y, model(x))

print("max |sinkgraph - torch| =", (y - model(x)).abs().max().item())
print(sinkgraph.counters(opt_model))
print(sinkgraph.explain(opt_model))
