#!/usr/bin/env bash
# The project's Python environment: a venv at .venv (repository root) with the
# pinned dependencies of requirements.txt (torch, torchvision, transformers,
# safetensors, numpy, pytest and the package's build tools). Idempotent: an
# existing venv is brought up to the pins. sinkgraph itself is installed by
# scripts/build.sh (`pip install .`).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${SG_PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -c "import torch, torchvision, transformers; print('venv:', 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
