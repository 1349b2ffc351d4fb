#!/usr/bin/env bash
# README command 1: install the system packages, build the release preset and
# run the main job: `sinkgraph generate` on the built-in model, eagerly and in
# reduce-overhead mode, checking that the ids agree and printing the decode
# speed-up measured in this run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
bin=./build/release/tools/sinkgraph

run() {  # run MODE -> "ids line" and "stats line" on two lines
  "$bin" generate --mode "$1" --print-ids --stats
}
field() {  # field JSON KEY
  sed -E "s/.*\"$2\":([0-9.e+-]+).*/\1/" <<<"$1"
}

echo "== sinkgraph generate --mode eager (built-in model: dim 288, 6 layers, vocab 32000)"
eager=$(run eager)
echo "$eager"
echo "== sinkgraph generate --mode reduce-overhead"
graph=$(run reduce-overhead)
echo "$graph"

eager_ids=$(head -n 1 <<<"$eager")
graph_ids=$(head -n 1 <<<"$graph")
eager_tps=$(field "$(tail -n 1 <<<"$eager")" decode_tokens_per_s)
graph_tps=$(field "$(tail -n 1 <<<"$graph")" decode_tokens_per_s)
if [[ $eager_ids == "$graph_ids" ]]; then
  echo "ids agree: yes (128 generated tokens)"
else
  echo "ids agree: NO"
  exit 1
fi
awk -v e="$eager_tps" -v g="$graph_tps" 'BEGIN {
  printf "decode: eager %.1f tokens/s, reduce-overhead %.1f tokens/s, speed-up %.2fx (measured in this run)\n", e, g, g / e }'
