#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer, ASan, UBSan) into build/fuzz and runs
# each for SECONDS: parser_fuzz seeded with tests/ir/golden, llama2c_fuzz and
# safetensors_fuzz seeded with tiny checkpoints that make_seeds writes. Exits
# non-zero on any finding: a crash, a sanitizer report, a leak, an input slower
# than -timeout, or memory above -rss_limit_mb. Findings are written to
# build/fuzz/findings/.
# Usage: bash fuzz/run.sh [SECONDS]   (SG_BUILD_LOCK=/path: build under flock)
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/fuzz
fuzzers=(parser_fuzz llama2c_fuzz safetensors_fuzz)
mkdir -p "$out/findings"
for f in "${fuzzers[@]}"; do mkdir -p "$out/corpus/$f"; done

configure_and_build() {
  if [[ ! -f $out/CMakeCache.txt ]]; then
    cmake -S "$root/fuzz" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None
  fi
  cmake --build "$out" --target parser_fuzz llama2c_fuzz safetensors_fuzz make_seeds
}
if [[ -n ${SG_BUILD_LOCK:-} ]]; then
  export -f configure_and_build
  export root out
  flock "$SG_BUILD_LOCK" bash -c configure_and_build
else
  configure_and_build
fi

# Seeds: the IR golden files, and tiny checkpoints written by make_seeds.
cp "$root"/tests/ir/golden/*.ir "$out/corpus/parser_fuzz/"
seeds=$out/seeds
rm -rf "$seeds"
ASAN_OPTIONS=detect_leaks=1 "$out/make_seeds" "$seeds"
cp "$seeds"/llama2c/* "$out/corpus/llama2c_fuzz/"
cp "$seeds"/safetensors/* "$out/corpus/safetensors_fuzz/"

declare -A extra=(
  [parser_fuzz]="-dict=$root/fuzz/ir.dict -max_len=4096"
  [llama2c_fuzz]="-max_len=8192"
  [safetensors_fuzz]="-dict=$root/fuzz/safetensors.dict -max_len=8192"
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
      -timeout=10 \
      -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 \
      -print_final_stats=1 \
      -artifact_prefix="$out/findings/$f-"
done
echo "fuzz: no findings in ${seconds}s each (${fuzzers[*]})"
