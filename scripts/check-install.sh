#!/usr/bin/env bash
# CI's install check (docs/install.md): install the release build into a
# temporary prefix and use it as a downstream project would, never the build
# tree: the CLI without LD_LIBRARY_PATH, examples/consumer through
# find_package(sinkgraph CONFIG), the same program through pkg-config, and the
# Python package from the prefix's site-packages folder.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install build/release --prefix "$prefix" >/dev/null
echo "installed into $prefix"

# The CLI: its version, and its default model under P/share/sinkgraph,
# from a folder where no relative path could find the build tree.
(cd "$work" && env -u LD_LIBRARY_PATH "$prefix/bin/sinkgraph" --version) | tee "$work/version"
grep -Eq '^sinkgraph [0-9]+\.[0-9]+\.[0-9]+$' "$work/version"
read -r -a ref <models/stories260K/bos_greedy_200.txt
want="ids: ${ref[*]:0:16}"
got=$(cd "$work" && env -u LD_LIBRARY_PATH "$prefix/bin/sinkgraph" generate --steps 16 --print-ids)
[[ $got == "$want" ]] || { echo "installed CLI: got '$got', want '$want'"; exit 1; }
echo "installed CLI: default model reproduces the reference (16 ids)"

# find_package(sinkgraph CONFIG) + sinkgraph::sinkgraph.
cmake -S examples/consumer -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
env -u LD_LIBRARY_PATH "$work/consumer/consumer" "$prefix/share/sinkgraph/stories260K"

# pkg-config (no RUNPATH from it: the program names the library's folder).
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
g++ -O1 examples/consumer/main.cpp -o "$work/consumer_pc" $(pkg-config --cflags --libs sinkgraph) \
  -Wl,-rpath,"$(pkg-config --variable=libdir sinkgraph)"
"$work/consumer_pc" "$prefix/share/sinkgraph/stories260K" 8 >/dev/null
echo "pkg-config build: $(pkg-config --modversion sinkgraph), runs"

# The Python package, where docs/install.md says it is.
site=$(find "$prefix" -path '*/site-packages/sinkgraph/__init__.py' -printf '%h\n' | head -n 1)
[[ -n $site ]] || { echo "no Python package under $prefix (python/CMakeLists.txt, component python)"; exit 1; }
if [[ -n $site ]]; then
  (cd "$work" && PYTHONPATH=$(dirname "$site") "$OLDPWD/.venv/bin/python" -c \
    "import sinkgraph; assert sinkgraph.__file__.startswith('$prefix'), sinkgraph.__file__; print('python package:', sinkgraph.__file__)")
fi
echo "install check passed"
