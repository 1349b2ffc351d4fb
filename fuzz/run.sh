#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer, ASan, UBSan) into build/fuzz and runs
# each for SECONDS: parser_fuzz seeded with the tests' IR files, llama2c_fuzz
# and safetensors_fuzz with tiny checkpoints that make_seeds writes,
# config_fuzz with their config.json files (ours and Hugging Face's),
# index_fuzz with a sharded Hugging Face index, gguf_fuzz with GGUF files of
# every type (docs/robustness.md). Exits
# non-zero on any finding: a crash, a sanitizer report, a leak, an input slower
# than -timeout, or memory above -rss_limit_mb. Findings are written to
# build/fuzz/findings/.
# Usage: bash fuzz/run.sh [SECONDS]   (SG_BUILD_LOCK=/path: build under flock)
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/fuzz
fuzzers=(parser_fuzz llama2c_fuzz safetensors_fuzz config_fuzz index_fuzz gguf_fuzz)
mkdir -p "$out/findings"
for f in "${fuzzers[@]}"; do mkdir -p "$out/corpus/$f"; done

configure_and_build() {
  if [[ ! -f $out/CMakeCache.txt ]]; then
    cmake -S "$root/fuzz" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None
  fi
  cmake --build "$out" --target parser_fuzz llama2c_fuzz safetensors_fuzz config_fuzz index_fuzz \
    gguf_fuzz make_seeds
}
if [[ -n ${SG_BUILD_LOCK:-} ]]; then
  export -f configure_and_build
  export root out
  flock "$SG_BUILD_LOCK" bash -c configure_and_build
else
  configure_and_build
fi

# Seeds: the IR files of the tests (golden and traced), tiny checkpoints and
# their config.json files written by make_seeds, and deep or large inputs
# (the fuzzers take up to 1 MB, so nesting and size limits are in reach).
cp "$root"/tests/ir/golden/*.ir "$out/corpus/parser_fuzz/"
for f in "$root"/tests/trace/*.ir; do cp "$f" "$out/corpus/parser_fuzz/traced_$(basename "$f")"; done
seeds=$out/seeds
rm -rf "$seeds"
ASAN_OPTIONS=detect_leaks=1 "$out/make_seeds" "$seeds"
cp "$seeds"/llama2c/* "$out/corpus/llama2c_fuzz/"
cp "$seeds"/safetensors/* "$out/corpus/safetensors_fuzz/"
cp "$seeds"/config/* "$out/corpus/config_fuzz/"
cp "$seeds"/index/* "$out/corpus/index_fuzz/"
cp "$seeds"/gguf/* "$out/corpus/gguf_fuzz/"
python3 - "$out/corpus" <<'PY'
import sys
corpus = sys.argv[1]
deep = "[" * 200 + "]" * 200
open(f"{corpus}/config_fuzz/deep.json", "w").write('{"dim": ' + deep + "}")
open(f"{corpus}/config_fuzz/dup.json", "w").write('{"dim": 8, "dim": 8}')
open(f"{corpus}/parser_fuzz/long.ir", "w").write(
    "graph @g(%x: f32[4] input) {\n" + "".join(f"  %v{i} = relu(%{'x' if i == 0 else f'v{i-1}'})\n" for i in range(5000))
    + "  return (%v4999)\n}\n")
PY

# Inputs up to 1 MB; a pinned seed (SG_FUZZ_SEED, default 20261130) so a CI
# run's verdict depends on the commit alone.
max_len=$((1 << 20))
declare -A extra=(
  [parser_fuzz]="-dict=$root/fuzz/ir.dict -max_len=$max_len"
  [llama2c_fuzz]="-max_len=$max_len"
  [safetensors_fuzz]="-dict=$root/fuzz/safetensors.dict -max_len=$max_len"
  [config_fuzz]="-dict=$root/fuzz/config.dict -max_len=$max_len"
  [index_fuzz]="-dict=$root/fuzz/index.dict -max_len=$max_len"
  [gguf_fuzz]="-dict=$root/fuzz/gguf.dict -max_len=$max_len"
)
cd "$out/findings"
for f in "${fuzzers[@]}"; do
  echo "fuzz: $f for ${seconds}s"
  # Leaks fail the run (libFuzzer's -detect_leaks is on by default with ASan).
  # shellcheck disable=SC2086
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$out/$f" "$out/corpus/$f" \
      ${extra[$f]} \
      -max_total_time="$seconds" \
      -seed="${SG_FUZZ_SEED:-20261130}" \
      -timeout=10 \
      -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 \
      -print_final_stats=1 \
      -artifact_prefix="$out/findings/$f-"
done
echo "fuzz: no findings in ${seconds}s each (${fuzzers[*]})"
