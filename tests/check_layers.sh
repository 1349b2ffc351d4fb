#!/usr/bin/env bash
# The layering rule: a layer never includes a layer above it. Layers, bottom up:
#   core < runtime < kernels < ops < ir < trace < passes < codegen < compiler < models < generation < dist
# Model code sits above the compiler in the build, but must not use it: it is
# mode-agnostic (checked below). Generation compiles model code and runs it.
# Each src/<layer>/ file may include public headers of its own layer or lower
# ones, and src/ internals of its own layer or lower ones.
set -euo pipefail
root=${1:-$(dirname "$0")/..}
layers=(core runtime kernels ops ir trace passes codegen compiler models generation dist)
# Which public header belongs to which layer.
declare -A header_layer=(
  [export.h]=core [error.h]=core [dtype.h]=core [symint.h]=core [shape.h]=core [files.h]=core
  [log.h]=core [version.h]=core
  [kernel_abi.h]=runtime [collectives.h]=runtime [device.h]=runtime [stream.h]=runtime [event.h]=runtime [allocator.h]=runtime [device_graph.h]=runtime
  [op_registry.h]=ops [tensor.h]=ops [ops.h]=ops
  [ir.h]=ir [trace.h]=trace [passes.h]=passes [compiler.h]=compiler [llama.h]=models [tokenizer.h]=models [generate.h]=generation [dist.h]=dist [device_graph.h]=runtime
)
rank() { local i; for i in "${!layers[@]}"; do [[ ${layers[$i]} == "$1" ]] && { echo "$i"; return; }; done; echo 99; }
status=0
for layer in "${layers[@]}"; do
  mine=$(rank "$layer")
  while IFS= read -r -d '' file; do
    while IFS= read -r inc; do
      target=""
      if [[ $inc =~ ^sinkgraph/(.+)$ ]]; then
        h=${BASH_REMATCH[1]}
        target=${header_layer[$h]:-}
        if [[ -z $target ]]; then echo "$file: public header $inc has no layer in check_layers.sh"; status=1; continue; fi
      elif [[ $inc =~ (^|/)(core|runtime|kernels|ops|ir|trace|passes|codegen|compiler|models|generation|dist)/ ]]; then
        target=${BASH_REMATCH[2]}
      fi
      [[ -z $target ]] && continue
      if (( $(rank "$target") > mine )); then
        echo "$file includes $inc: layer '$layer' must not include layer '$target' above it"
        status=1
      fi
    done < <(grep -oE '#include "[^"]+"' "$file" | sed -E 's/#include "(.*)"/\1/')
  done < <(find "$root/src/$layer" -name '*.cpp' -print0 -o -name '*.h' -print0)
done
# Public headers obey the same rule among themselves.
for h in "${!header_layer[@]}"; do
  mine=$(rank "${header_layer[$h]}")
  while IFS= read -r inc; do
    t=${header_layer[${inc#sinkgraph/}]:-}
    if [[ -n $t ]] && (( $(rank "$t") > mine )); then
      echo "include/sinkgraph/$h includes $inc: layer '${header_layer[$h]}' must not include layer '$t'"
      status=1
    fi
  done < <(grep -oE '#include "sinkgraph/[^"]+"' "$root/include/sinkgraph/$h" | sed -E 's/#include "(.*)"/\1/')
done
# Model code is mode-agnostic: it never includes the compiler (generation does).
while IFS= read -r file; do
  echo "$file includes sinkgraph/compiler.h: model code must not depend on a mode"
  status=1
done < <(grep -rlE '#include "sinkgraph/compiler\.h"' "$root/src/models" "$root/include/sinkgraph/llama.h" || true)
# Only src/dist/ knows MPI (the core library, tools and Python never include it).
while IFS= read -r file; do
  case $file in
    "$root"/src/dist/*) ;;
    *) echo "$file includes mpi.h: only src/dist/ may use MPI"; status=1 ;;
  esac
done < <(grep -rlE '#include <mpi\.h>' "$root/src" "$root/include" "$root/tools" "$root/python" 2>/dev/null || true)
[[ $status == 0 ]] && echo "layering: ok"
exit $status
