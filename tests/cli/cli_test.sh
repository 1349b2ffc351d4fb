#!/usr/bin/env bash
# The `sinkgraph` command line: outputs, stdout rules and exit statuses
# (DESIGN.md, "sinkgraph generate"; the `ir` and `make-model` commands).
# Usage: cli_test.sh path/to/sinkgraph source_dir
set -uo pipefail
bin=$1
src=$2
shared="$src/../shared/models/stories260K"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

check() {  # check NAME EXPECTED_STATUS -- command...
  local name=$1 want=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got == "$want" ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got, expected $want"
    sed 's/^/  stdout: /' "$tmp/out" | head -5
    sed 's/^/  stderr: /' "$tmp/err" | head -5
  fi
}
expect() {  # expect NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}

# A small model to work with.
check make-model 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
  --vocab 64 --seq-len 32 --seed 3 --format llama2c --out "$tmp/m.bin"
check make-model-st 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
  --vocab 64 --seq-len 32 --seed 3 --format safetensors --dtype bf16 --rope-style half --out "$tmp/st/model.safetensors"

# --print-ids: one line, generated ids only.
check print-ids 0 -- "$bin" generate --model "$tmp/m.bin" --steps 5 --print-ids
expect print-ids-one-line test "$(wc -l <"$tmp/out")" = 1
expect print-ids-format grep -qE '^ids: [0-9]+( [0-9]+){4}$' "$tmp/out"
ids_ro=$(cat "$tmp/out")
check eager-ids 0 -- "$bin" generate --model "$tmp/m.bin" --steps 5 --print-ids --mode eager
expect eager-equals-reduce-overhead test "$(cat "$tmp/out")" = "$ids_ro"

# --stats: one JSON line, printed last, with every key.
check stats 0 -- "$bin" generate --model "$tmp/m.bin" --steps 6 --print-ids --stats --explain
expect stats-two-lines test "$(wc -l <"$tmp/out")" = 2
tail -n 1 "$tmp/out" >"$tmp/stats.json"
expect stats-keys python3 - "$tmp/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
keys = ["mode", "prompt_tokens", "generated_tokens", "prefill_tokens_per_s", "decode_tokens_per_s",
        "decode_us_per_token", "captured", "replayed", "prefill_captured", "decode_captured",
        "recapture_due_to_mutated_input_change", "recapture_due_to_parameter_change",
        "recapture_due_to_force_recapture", "eager_fallback_due_to_capture_limit",
        "pool_reserved_bytes", "peak_allocated_bytes"]
missing = [k for k in keys if k not in s]
assert not missing, missing
assert s["mode"] == "reduce-overhead" and s["generated_tokens"] == 6 and s["decode_captured"] == 1, s
# one prefill call and five decode steps: every call replays, prefill and decode capture once
assert s["replayed"] == 6 and s["captured"] == 2 and s["prefill_captured"] == 1, s
PY
expect explain-on-stderr grep -q "CapturedGraph" "$tmp/err"
check stats-eager 0 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --stats --mode eager
expect eager-counters-zero grep -q '"captured":0' "$tmp/out"
check max-autotune 0 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --stats --mode max-autotune
expect max-autotune-stats grep -q '"mode":"max-autotune"' "$tmp/out"

# --dump-logits: P + N - 1 rows of vocab f32.
check dump 0 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids "1 2 3" --steps 4 --dump-logits "$tmp/l.f32" --print-ids
expect dump-size test "$(stat -c %s "$tmp/l.f32")" = $(((3 + 4 - 1) * 64 * 4))

# --trace: Chrome trace JSON with host and device tracks.
check trace 0 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --trace "$tmp/t.json" --print-ids
expect trace-json python3 -c "import json,sys; e=json.load(open('$tmp/t.json'))['traceEvents']; \
assert any(x['name']=='graph_replay' for x in e); assert any('[capture]' in x['name'] for x in e)"

# Readable summary without flags; safetensors model.
check summary 0 -- "$bin" generate --model "$tmp/st" --steps 4
expect summary-text grep -q "decode:" "$tmp/out"

# User errors exit 2.
check bad-flag 2 -- "$bin" generate --no-such-flag
check bad-mode 2 -- "$bin" generate --mode fast
check missing-file 2 -- "$bin" generate --model "$tmp/nope.bin"
head -c 1000 "$tmp/m.bin" >"$tmp/trunc.bin"
check truncated 2 -- "$bin" generate --model "$tmp/trunc.bin"
expect truncated-names-file grep -q "trunc.bin" "$tmp/err"
check bad-ids 2 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids "1 x"
check id-range 2 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids "1 64"
check stop-id-range 2 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --stop-id 64
expect stop-id-message grep -q "stop-id 64 is out of range" "$tmp/err"
check too-long 2 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids "1 2" --steps 31
expect too-long-message grep -q "seq_len" "$tmp/err"

# sinkgraph ir
cat >"$tmp/g.ir" <<'IR'
graph @g(%x: f32[4] input) {
  %a = relu(%x)
  %b = relu(%x)
  %c = add(%a, %b)
  return (%c)
}
IR
check ir-ok 0 -- "$bin" ir "$tmp/g.ir"
expect ir-silent test ! -s "$tmp/out"
check ir-print 0 -- "$bin" ir "$tmp/g.ir" --passes cse,dce --print
expect ir-cse test "$(grep -c relu "$tmp/out")" = 1
check ir-unknown-pass 2 -- "$bin" ir "$tmp/g.ir" --passes cse,nope
expect ir-unknown-pass-named grep -q "nope" "$tmp/err"
printf 'graph @g(%%x: f32[4] input) {\n  %%a = rleu(%%x)\n  return (%%a)\n}\n' >"$tmp/bad.ir"
check ir-bad 2 -- "$bin" ir "$tmp/bad.ir"
expect ir-bad-location grep -q "bad.ir:2:8" "$tmp/err"

# The shared reference model, when present.
if [[ -f $shared/stories260K.bin ]]; then
  check stories 0 -- "$bin" generate --model "$shared/stories260K.bin" --steps 200 --print-ids
  expect stories-greedy test "$(cut -d' ' -f2- "$tmp/out")" = "$(tr -s ' \n' ' ' <"$shared/bos_greedy_200.txt" | sed 's/ $//')"
else
  echo "skipped: $shared is absent (the shared reference model)"
fi

echo "cli: $pass passed, $fail failed"
[[ $fail == 0 ]]
