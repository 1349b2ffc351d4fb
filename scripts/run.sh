#!/usr/bin/env bash
# README command 1: install the system packages and the Python environment
# (.venv), build (release) and install the package into the venv, and run the
# main job: the shipped stories260K model (a real trained Llama,
# models/stories260K/) decodes 200 tokens from BOS in eager, reduce-overhead
# and max-autotune mode; then the same model, converted to a Hugging Face
# folder, decodes 200 tokens through transformers' generate (static cache) in
# eager, under Inductor and under sinkgraph's two graph modes
# (bench/hf_decode.py). Every run's ids are checked against the shipped
# reference; the speeds are medians of interleaved rounds measured here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
bash scripts/build.sh
bin=./build/release/tools/sinkgraph
read -r -a ref_ids <models/stories260K/bos_greedy_200.txt
reference="ids: ${ref_ids[*]}"
modes=(eager reduce-overhead max-autotune)
rounds=${SG_RUN_ROUNDS:-11}

field() {  # field JSON KEY
  sed -E "s/.*\"$2\":([0-9.e+-]+).*/\1/" <<<"$1"
}
median() {  # median of the numbers on stdin
  sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "== sinkgraph generate --steps 200 on models/stories260K (dim 64, 5 layers, vocab 512)"
echo "   $rounds rounds, modes interleaved; every run's ids checked against models/stories260K/bos_greedy_200.txt"
declare -A tps ratios stats
for ((r = 1; r <= rounds; r++)); do
  for mode in "${modes[@]}"; do
    out=$("$bin" generate --steps 200 --mode "$mode" --print-ids --stats)
    if [[ $(head -n 1 <<<"$out") != "$reference" ]]; then
      echo "$mode: ids differ from the reference (round $r):"
      head -n 1 <<<"$out"
      exit 1
    fi
    stats[$mode]=$(tail -n 1 <<<"$out")
    t=$(field "${stats[$mode]}" decode_tokens_per_s)
    [[ $mode == eager ]] && round_eager=$t
    tps[$mode]+="$t "
    ratios[$mode]+="$(awk -v t="$t" -v e="$round_eager" 'BEGIN { print t / e }') "
  done
done

for mode in "${modes[@]}"; do
  t=$(tr ' ' '\n' <<<"${tps[$mode]}" | grep . | median)
  x=$(tr ' ' '\n' <<<"${ratios[$mode]}" | grep . | median)
  lo=$(tr ' ' '\n' <<<"${ratios[$mode]}" | grep . | sort -g | head -n 1)
  hi=$(tr ' ' '\n' <<<"${ratios[$mode]}" | grep . | sort -g | tail -n 1)
  s=${stats[$mode]}
  awk -v mode="$mode" -v t="$t" -v x="$x" -v lo="$lo" -v hi="$hi" \
      -v c="$(field "$s" captured)" -v rp="$(field "$s" replayed)" 'BEGIN {
    printf "%-16s %6.0f tokens/s %6.1f us/token  %4.2fx eager (%4.2f-%4.2f)  graphs captured %s, replays %s  ids match: yes\n",
           mode, t, 1e6 / t, x, lo, hi, c, rp }'
done
echo "(medians over the rounds; the speed-up is eager's time over the mode's in the same"
echo " round, with its range in brackets; graphs and replays count one run: prefill + decode)"

echo
echo "== transformers' generate (static KV cache, 200 tokens from BOS) on models/stories260K as a Hugging Face folder"
echo "   $rounds rounds, variants interleaved, one compute thread; every run's ids checked against the reference"
.venv/bin/python bench/hf_decode.py --models stories260K --new 200 --rounds "$rounds" \
  --variants eager,inductor,reduce-overhead,max-autotune \
  --reference models/stories260K/bos_greedy_200.txt --brief --out build/main-job-hf-decode.json
echo "(generate's tokens/s, prefill and transformers' own Python per step included; the decode step"
echo " is the median time of the model's forward; the speed-up is eager's time over the variant's"
echo " in the same round, with its range in brackets)"
