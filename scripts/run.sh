#!/usr/bin/env bash
# README command 1: install the system packages, build the release preset and
# run the main job. (Until the Llama model lands, the main job is a short demo
# of eager execution on the CPU device.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
./build/release/tools/sinkgraph demo
