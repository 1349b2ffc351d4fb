#!/usr/bin/env bash
# README command 2: build the release preset (if needed) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release
cmake --build --preset release
ctest --preset release -j2
