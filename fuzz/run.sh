#!/usr/bin/env bash
# Builds the IR parser fuzzer (clang, libFuzzer, ASan, UBSan) into build/fuzz
# and runs it for SECONDS, seeded with tests/ir/golden. Exits non-zero on any
# finding: a crash, a sanitizer report, a leak, an input slower than -timeout,
# or memory above -rss_limit_mb. Findings are written to build/fuzz/findings/.
# Usage: bash fuzz/run.sh [SECONDS]   (SG_BUILD_LOCK=/path: build under flock)
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/fuzz
mkdir -p "$out/corpus" "$out/findings"

configure_and_build() {
  if [[ ! -f $out/CMakeCache.txt ]]; then
    cmake -S "$root/fuzz" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None
  fi
  cmake --build "$out" --target parser_fuzz
}
if [[ -n ${SG_BUILD_LOCK:-} ]]; then
  export -f configure_and_build
  export root out
  flock "$SG_BUILD_LOCK" bash -c configure_and_build
else
  configure_and_build
fi

cp "$root"/tests/ir/golden/*.ir "$out/corpus/"
cd "$out/findings"
# Leaks fail the run (libFuzzer's -detect_leaks is on by default with ASan).
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$out/parser_fuzz" "$out/corpus" \
    -dict="$root/fuzz/ir.dict" \
    -max_total_time="$seconds" \
    -max_len=4096 \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 \
    -print_final_stats=1 \
    -artifact_prefix="$out/findings/"
echo "fuzz: no findings in ${seconds}s"
