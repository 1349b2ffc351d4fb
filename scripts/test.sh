#!/usr/bin/env bash
# README command 2: build (if needed) and run every test, C++ (ctest) and
# Python (pytest, from the venv; ctest runs each test file as python.<name>).
# Needs what README command 1 installs (Debian packages, .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || bash scripts/setup-venv.sh
bash scripts/build.sh
ctest --preset release -j2
