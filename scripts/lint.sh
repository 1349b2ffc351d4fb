#!/usr/bin/env bash
# Style and static checks, both configured at the repository root:
#   clang-format (.clang-format) over every tracked C++ file, and
#   clang-tidy (.clang-tidy, warnings as errors) over src/, tools/ and the
#   Python extension (python/src/module.cpp, dlpack.cpp) with the headers they
#   include, using build/release/compile_commands.json.
# Exits non-zero on any finding. Usage: bash scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "=== clang-format ==="
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror
if [[ ! -f build/release/compile_commands.json ]]; then
  cmake --preset release >/dev/null
fi
echo "=== clang-tidy (src, tools, python/src) ==="
run-clang-tidy-14 -p build/release -quiet -j "$(nproc)" "$PWD/src/" "$PWD/tools/" \
  "$PWD/python/src/module.cpp" "$PWD/python/src/dlpack.cpp" >build/release/clang-tidy.log 2>&1 || {
  grep -E "(warning|error):" build/release/clang-tidy.log | sort -u
  echo "clang-tidy: findings above (whole log: build/release/clang-tidy.log)"
  exit 1
}
echo "lint: clean"
