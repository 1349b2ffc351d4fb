#!/usr/bin/env bash
# The wheel, as a user gets it: built from build/release (the tree ctest used;
# no second compile of the core), installed into a new venv that has only
# torch, at the lowest release of the supported range (torch 2.13.0, CPU;
# the project's .venv has the highest, 2.14.1), then used there:
#   - `import sinkgraph` finds the wheel's copy, and importlib.metadata's
#     version equals `sinkgraph --version` (the CLI the wheel ships);
#   - a model compiled by name (`backend="sinkgraph"`, the torch_dynamo_backends
#     entry point) in a process that never imported sinkgraph, in all three
#     modes, equals eager.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" .
wheel=$(ls "$work"/dist/sinkgraph-*.whl)
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "torch==${SG_WHEEL_TORCH:-2.13.0}" numpy==2.4.6
"$work/venv/bin/python" -m pip install -q "$wheel"
cd "$work"
version=$(venv/bin/sinkgraph --version)
venv/bin/python - "$version" <<'PY'
import importlib.metadata
import sys

import torch

cli = sys.argv[1]
meta = importlib.metadata.version("sinkgraph")
assert cli == f"sinkgraph {meta}", (cli, meta)
assert "sinkgraph" not in sys.modules
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                            torch.nn.Linear(64, 8)).eval()
x = torch.randn(2, 16)
with torch.no_grad():
    ref = model(x)
    for mode in ["default", "reduce-overhead", "max-autotune"]:
        torch._dynamo.reset()
        opt = torch.compile(model, backend="sinkgraph", mode=mode)
        for _ in range(3):
            torch.testing.assert_close(opt(x), ref, rtol=1e-3, atol=1e-4)
import sinkgraph

assert sinkgraph.__file__.startswith(sys.prefix), sinkgraph.__file__
c = sinkgraph.counters()
assert c["replayed"] >= 4 and c["fallback_nodes"] == 0, c
print(f"wheel: {cli}, torch {torch.__version__}, by-name backend in 3 modes equals eager, "
      f"counters {c}")
PY
