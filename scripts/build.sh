#!/usr/bin/env bash
# Builds everything once and installs the Python package into .venv:
# `pip install .` runs the project's CMake build in build/release (the folder
# the release preset uses: library, CLI, tests, benchmarks and the extension;
# pyproject.toml), so ctest and the installed package come from one build.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --no-build-isolation --no-deps .
.venv/bin/python -c "import sinkgraph; print('installed sinkgraph', sinkgraph.__version__, 'from', sinkgraph.__file__)"
