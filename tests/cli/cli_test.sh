#!/usr/bin/env bash
# The `sinkgraph` command line: outputs, stdout rules and exit statuses
# (DESIGN.md, "sinkgraph generate"; the `ir` and `make-model` commands).
# Usage: cli_test.sh path/to/sinkgraph source_dir
set -uo pipefail
bin=$1
src=$2
shared="$src/../shared/models/stories260K"
# shellcheck source=checks.sh
source "$(dirname "$0")/checks.sh"

# A small model to work with.
check make-model 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
  --vocab 64 --seq-len 32 --seed 3 --format llama2c --out "$tmp/m.bin"
check make-model-st 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
  --vocab 64 --seq-len 32 --seed 3 --format safetensors --dtype bf16 --rope-style half --out "$tmp/st/model.safetensors"
# A new --out not named *.safetensors is a folder holding both files, not a
# file with config.json dropped into its parent; it loads as the same model.
check make-model-st-folder 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 \
  --hidden 64 --vocab 64 --seq-len 32 --seed 3 --format safetensors --dtype bf16 --rope-style half \
  --out "$tmp/st-folder"
expect make-model-st-folder-files test -f "$tmp/st-folder/model.safetensors" -a -f "$tmp/st-folder/config.json" -a ! -e "$tmp/config.json"
check st-file-ids 0 -- "$bin" generate --model "$tmp/st/model.safetensors" --steps 4 --print-ids
st_file_ids=$(cat "$tmp/out")
check st-folder-ids 0 -- "$bin" generate --model "$tmp/st-folder" --steps 4 --print-ids
expect st-folder-same-ids test "$(cat "$tmp/out")" = "$st_file_ids"

# Outputs get the mode a plain create gives (not mkstemp's 0600): others can read a model.
expect make-model-mode test "$(stat -c %a "$tmp/m.bin")" = "$(printf '%o' $((0666 & ~$(umask))))"

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
        "pool_reserved_bytes", "peak_allocated_bytes", "kv_cache_bytes", "codegen_kernels",
        "compile_cache_hits", "threads", "weight_bytes", "tp_size"]
missing = [k for k in keys if k not in s]
assert not missing, missing
# m.bin's weights, counted from its config (dim 32, kv dim 16, hidden 64, 2
# layers, vocab 64, classifier shared with the embedding), f32.
layer = 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 3 * 64 * 32
assert s["weight_bytes"] == 4 * (64 * 32 + 2 * layer + 32) and s["tp_size"] == 1, s
assert s["mode"] == "reduce-overhead" and s["generated_tokens"] == 6 and s["decode_captured"] == 1, s
# one prefill call and five decode steps: every call replays, prefill and decode capture once
assert s["replayed"] == 6 and s["captured"] == 2 and s["prefill_captured"] == 1, s
PY
expect explain-on-stderr grep -q "CapturedGraph" "$tmp/err"
check stats-eager 0 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --stats --mode eager
expect eager-counters-zero grep -q '"captured":0' "$tmp/out"
check max-autotune 0 -- "$bin" generate --model "$tmp/m.bin" --steps 4 --stats --mode max-autotune
expect max-autotune-stats grep -q '"mode":"max-autotune"' "$tmp/out"

# --tensor-parallel without mpirun is a user error in every build: with MPI
# the world has one process; without, the build says it has no MPI
# (tensor_parallel_test.sh runs it under mpirun).
# With MPI this run initialises it (a singleton): under ASan, Open MPI's
# allocations alive at exit are suppressed as for the MPI tests
# (tests/dist/lsan.supp; tests/CMakeLists.txt says why).
mpi_env=(env OMPI_MCA_mca_base_component_disable_dlclose=1
  "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
  "LSAN_OPTIONS=suppressions=$src/tests/dist/lsan.supp")
check tensor-parallel-alone 2 -- "${mpi_env[@]}" "$bin" generate --model "$tmp/m.bin" \
  --tensor-parallel 2 --steps 3
expect tensor-parallel-alone-message grep -qE 'start it as mpirun|built without MPI' "$tmp/err"

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
check threads-zero 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --threads 0
expect threads-zero-message grep -q "threads must be from 1 to" "$tmp/err"
check threads-word 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --threads two
# --threads and SINKGRAPH_NUM_THREADS set the compute threads; the ids do not change.
check threads-3 0 -- "$bin" generate --model "$tmp/m.bin" --steps 5 --print-ids --stats --threads 3
expect threads-3-stats grep -q '"threads":3' "$tmp/out"
expect threads-3-ids test "$(head -n 1 "$tmp/out")" = "$ids_ro"
check threads-env 0 -- env SINKGRAPH_NUM_THREADS=1 "$bin" generate --model "$tmp/m.bin" --steps 2 --stats
expect threads-env-stats grep -q '"threads":1' "$tmp/out"
check threads-env-bad 0 -- env SINKGRAPH_NUM_THREADS=lots "$bin" generate --model "$tmp/m.bin" --steps 2 --stats
expect threads-env-bad-warns grep -q "SINKGRAPH_NUM_THREADS" "$tmp/err"
check too-long 2 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids "1 2" --steps 31
expect too-long-message grep -q "seq_len" "$tmp/err"

# Batched decoding: --prompts-file, more prompts than --max-batch, so
# sequences leave and join; each prompt's ids equal its solo ids, in every
# mode, with and without a stop id; one decode graph per bucket used.
printf '1\n1 5 9\n1 2 3 4 5\n1 7\n1 30 31\n' >"$tmp/prompts.txt"
for mode in eager reduce-overhead max-autotune; do
  : >"$tmp/solo"
  : >"$tmp/solo-stop"
  while IFS= read -r p; do
    "$bin" generate --model "$tmp/m.bin" --prompt-ids "$p" --steps 8 --mode "$mode" --print-ids \
      >>"$tmp/solo" 2>/dev/null
    "$bin" generate --model "$tmp/m.bin" --prompt-ids "$p" --steps 8 --mode "$mode" --print-ids \
      --stop-id 7 >>"$tmp/solo-stop" 2>/dev/null
  done <"$tmp/prompts.txt"
  check "batch-$mode" 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
    --steps 8 --max-batch 2 --mode "$mode" --print-ids --stats
  expect "batch-$mode-ids" diff <(head -n 5 "$tmp/out") "$tmp/solo"
  expect "batch-$mode-lines" test "$(wc -l <"$tmp/out")" = 6
  if [[ $mode != eager ]]; then
    expect "batch-$mode-buckets" grep -q '"batch_buckets_captured":2' "$tmp/out"
    expect "batch-$mode-decode-graphs" grep -q '"decode_captured":2' "$tmp/out"
    expect "batch-$mode-pool-bytes" grep -Eq '"bucket_pool_bytes":\{"1":[0-9]+,"2":[0-9]+\}' "$tmp/out"
  fi
  check "batch-$mode-stop" 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file \
    "$tmp/prompts.txt" --steps 8 --max-batch 3 --mode "$mode" --print-ids --stop-id 7
  expect "batch-$mode-stop-ids" diff "$tmp/out" "$tmp/solo-stop"
done
check batch-explain 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --steps 8 --max-batch 3 --capture-sizes 1,2,4 --print-ids --explain
expect batch-explain-buckets grep -q "bucket 4 (3 live, 1 padded)" "$tmp/err"
# --warmup-buckets captures every bucket the slots can use before decoding;
# --graph-memory-budget stops capturing once the pools reach it (bucket 4
# runs eagerly, warned), and the ids stay the same.
check batch-warmup 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --steps 8 --max-batch 4 --warmup-buckets --print-ids --stats
expect batch-warmup-buckets grep -Eq '"batch_buckets_captured":3.*"bucket_pool_bytes":\{"1":[0-9]+,"2":[0-9]+,"4":[0-9]+\}' "$tmp/out"
head -n 5 "$tmp/out" >"$tmp/warm-ids"
check batch-budget 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --steps 8 --max-batch 4 --warmup-buckets --graph-memory-budget 1 --print-ids --stats
expect batch-budget-buckets grep -q '"batch_buckets_captured":1,' "$tmp/out"
expect batch-budget-warns grep -q "graph_memory_budget: .* bucket 2 runs eagerly" "$tmp/err"
expect batch-budget-ids diff <(head -n 5 "$tmp/out") "$tmp/warm-ids"
check batch-budget-bad 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --graph-memory-budget -5
# Sampling is a function of (seed, prompt index, position): the first prompt
# samples as it does alone.
check batch-sample 0 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --steps 8 --max-batch 2 --temperature 0.9 --seed 11 --print-ids
head -n 1 "$tmp/out" >"$tmp/first"
check batch-sample-solo 0 -- "$bin" generate --model "$tmp/m.bin" --prompt-ids 1 --steps 8 \
  --temperature 0.9 --seed 11 --print-ids
expect batch-sample-first diff "$tmp/out" "$tmp/first"
: >"$tmp/empty.txt"
check batch-empty-file 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/empty.txt"
expect batch-empty-message grep -q "has no prompts" "$tmp/err"
printf '1 2\n1 x 3\n' >"$tmp/bad.txt"
check batch-bad-id 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/bad.txt"
expect batch-bad-id-line grep -q "line 2: 'x' is not a decimal integer" "$tmp/err"
printf '1 2\n1 99\n' >"$tmp/range.txt"
check batch-range 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/range.txt" --steps 4
expect batch-range-line grep -q "prompt 2 (line 2): id 99 is out of range" "$tmp/err"
check batch-max-zero 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --max-batch 0
check batch-and-prompt-ids 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file \
  "$tmp/prompts.txt" --prompt-ids "1 2"
check batch-sizes-bad 2 -- "$bin" generate --model "$tmp/m.bin" --prompts-file "$tmp/prompts.txt" \
  --capture-sizes 2,1

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

# ---- Hostile input (docs/robustness.md): exit 2, one clear message naming the
# file, nothing left behind, never a hang.
nothing_left() {  # nothing_left DIR: no temporary of ours in DIR
  ! ls -a "$1" | grep -q '\.tmp'
}
mkdir -p "$tmp/h"
mkfifo "$tmp/h/fifo"
check fifo-model 2 -- timeout 20 "$bin" generate --model "$tmp/h/fifo" --steps 2
expect fifo-model-said grep -q "not a regular file (a FIFO)" "$tmp/err"
check fifo-ir 2 -- timeout 20 "$bin" ir "$tmp/h/fifo"
mkdir -p "$tmp/h/st"
cp "$tmp/st/model.safetensors" "$tmp/h/st/"
mkfifo "$tmp/h/st/config.json"
check fifo-config 2 -- timeout 20 "$bin" generate --model "$tmp/h/st" --steps 2
expect fifo-config-said grep -q "config.json: the config is not a regular file" "$tmp/err"
check dev-zero-ir 2 -- timeout 20 "$bin" ir /dev/zero
expect dev-zero-said grep -q "character device" "$tmp/err"
# JSON nested 100,000 deep in config.json and in a safetensors header entry.
python3 - "$tmp/h" "$tmp/st" <<'PY'
import json, os, struct, sys
out, st = sys.argv[1], sys.argv[2]
deep = "[" * 100000 + "]" * 100000
os.makedirs(f"{out}/deepcfg", exist_ok=True)
open(f"{out}/deepcfg/config.json", "w").write('{"dim": ' + deep + "}")
os.link(f"{st}/model.safetensors", f"{out}/deepcfg/model.safetensors")
data = open(f"{st}/model.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
text = json.dumps(header)[:-1] + ', "x": ' + deep + "}"
os.makedirs(f"{out}/deephdr", exist_ok=True)
open(f"{out}/deephdr/config.json", "w").write(open(f"{st}/config.json").read())
open(f"{out}/deephdr/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text.encode() + data[8 + n:])
# A duplicate key, a NaN weight, a hole in the data section.
cfg = open(f"{st}/config.json").read()
os.makedirs(f"{out}/dupkey", exist_ok=True)
open(f"{out}/dupkey/config.json", "w").write(cfg.replace("{", '{"dim": 7, ', 1))
os.link(f"{st}/model.safetensors", f"{out}/dupkey/model.safetensors")
name, entry = next((k, v) for k, v in header.items() if k.endswith("attention_norm.weight"))
begin = 8 + n + entry["data_offsets"][0]
os.makedirs(f"{out}/nan", exist_ok=True)
open(f"{out}/nan/config.json", "w").write(cfg)
blob = bytearray(data)
blob[begin:begin + 2] = struct.pack("<H", 0x7FC0)  # bf16 NaN
open(f"{out}/nan/model.safetensors", "wb").write(bytes(blob))
# JSON is the text and nothing else (Note [Bounded JSON]): a NUL byte ends
# nothing (nlohmann stopped there), a BOM is refused, trailing spaces pass.
for case, c, h in [("cfg-nul", cfg.encode() + b"\0garbage", None), ("cfg-bom", b"\xef\xbb\xbf" + cfg.encode(), None),
                   ("cfg-space", cfg.encode() + b"  \n", None), ("hdr-nul", None, data[8:8 + n] + b"\0" * 8),
                   ("hdr-bom", None, b"\xef\xbb\xbf" + data[8:8 + n]), ("hdr-space", None, data[8:8 + n] + b" " * 8)]:
    os.makedirs(f"{out}/{case}", exist_ok=True)
    open(f"{out}/{case}/config.json", "wb").write(c if c is not None else cfg.encode())
    blob = data if h is None else struct.pack("<Q", len(h)) + h + data[8 + n:]
    open(f"{out}/{case}/model.safetensors", "wb").write(blob)
# Finite weights whose products overflow: every value of one projection is
# bf16's largest (about 3.4e38), so the logits are NaN or infinite.
name, entry = next((k, v) for k, v in header.items() if k.endswith("layers.1.feed_forward.w2.weight"))
blob = bytearray(data)
blob[8 + n + entry["data_offsets"][0]:8 + n + entry["data_offsets"][1]] = struct.pack("<H", 0x7F7F) * (
    (entry["data_offsets"][1] - entry["data_offsets"][0]) // 2)
os.makedirs(f"{out}/huge", exist_ok=True)
open(f"{out}/huge/config.json", "w").write(cfg)
open(f"{out}/huge/model.safetensors", "wb").write(bytes(blob))
hole = dict(header)
last = max((k for k in hole if k != "__metadata__"), key=lambda k: hole[k]["data_offsets"][1])
text = json.dumps(hole)
os.makedirs(f"{out}/hole", exist_ok=True)
open(f"{out}/hole/config.json", "w").write(cfg)
open(f"{out}/hole/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text.encode() + data[8 + n:] + b"\0" * 64)
PY
check deep-config 2 -- "$bin" generate --model "$tmp/h/deepcfg" --steps 2
expect deep-config-said grep -q "nests deeper than 64 levels" "$tmp/err"
check deep-header 2 -- "$bin" generate --model "$tmp/h/deephdr" --steps 2
expect deep-header-said grep -q "nests deeper than 64 levels" "$tmp/err"
check duplicate-key 2 -- "$bin" generate --model "$tmp/h/dupkey" --steps 2
expect duplicate-key-said grep -q 'has the key "dim" twice' "$tmp/err"
check nan-weight 2 -- "$bin" generate --model "$tmp/h/nan" --steps 2
expect nan-weight-said grep -q "attention_norm.weight holds a value that is not finite (nan) at index 0" "$tmp/err"
check hole 2 -- "$bin" generate --model "$tmp/h/hole" --steps 2
expect hole-said grep -q "at the end of the data section belong to no tensor" "$tmp/err"
for part in cfg hdr; do
  check "json-$part-nul" 2 -- "$bin" generate --model "$tmp/h/$part-nul" --steps 2
  expect "json-$part-nul-said" grep -q "holds a NUL byte at offset" "$tmp/err"
  check "json-$part-bom" 2 -- "$bin" generate --model "$tmp/h/$part-bom" --steps 2
  expect "json-$part-bom-said" grep -q "starts with a UTF-8 byte order mark" "$tmp/err"
  check "json-$part-space" 0 -- "$bin" generate --model "$tmp/h/$part-space" --steps 2
done
# Non-finite logits are an error naming the position, in every mode and for
# many prompts decoded together (Note [Non-finite logits]), never ids.
for mode in eager reduce-overhead max-autotune; do
  check "huge-weights-$mode" 2 -- "$bin" generate --model "$tmp/h/huge" --steps 4 --mode "$mode" --print-ids
  expect "huge-weights-$mode-said" grep -q "logits at position 0 are not finite" "$tmp/err"
  expect "huge-weights-$mode-no-ids" test ! -s "$tmp/out"
done
printf '1 5\n1\n' >"$tmp/h/huge-prompts"
check huge-weights-batch 2 -- "$bin" generate --model "$tmp/h/huge" --steps 4 --prompts-file "$tmp/h/huge-prompts"
expect huge-weights-batch-said grep -q "logits at position 1 are not finite" "$tmp/err"
# Sizes and arithmetic.
check steps-overflow 2 -- "$bin" generate --model "$tmp/m.bin" --steps 9223372036854775807
check make-model-too-big 2 -- "$bin" make-model --dim 65536 --layers 1024 --heads 64 --kv-heads 64 \
  --hidden 1048576 --vocab 32000 --seq-len 16 --seed 1 --format llama2c --out "$tmp/h/big.bin"
expect make-model-too-big-said grep -q "bytes of memory" "$tmp/err"
expect make-model-too-big-nothing test ! -e "$tmp/h/big.bin"
# Outputs: written whole or not at all.
check dump-unwritable 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --dump-logits /nonexistent/x.bin
expect dump-unwritable-said grep -q "cannot write here" "$tmp/err"
check dump-too-large 2 -- bash -c "trap '' XFSZ; ulimit -f 1; exec '$bin' generate --steps 50 --dump-logits '$tmp/h/l.bin'"
expect dump-too-large-said grep -q "File too large" "$tmp/err"
expect dump-too-large-nothing test ! -e "$tmp/h/l.bin"
expect dump-too-large-no-temp nothing_left "$tmp/h"
# Outputs never overwrite inputs (Note [Outputs never overwrite inputs]): the
# model file, a folder's config or weights, by path, symbolic or hard link;
# convert into its own input or its folder. Each refused before any work,
# the input byte for byte unchanged.
mkdir -p "$tmp/ow"
"$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 50 --seq-len 16 \
  --seed 4 --format safetensors --out "$tmp/ow/m" >/dev/null 2>&1
cp -r "$tmp/ow/m" "$tmp/ow/keep"
cp "$tmp/m.bin" "$tmp/ow/m.bin.keep"
ln "$tmp/ow/m/model.safetensors" "$tmp/ow/hard"
ln -s "$tmp/ow/m/config.json" "$tmp/ow/soft"
check dump-over-model-file 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --dump-logits "$tmp/m.bin"
expect dump-over-model-file-said grep -q "^error: --dump-logits: .* is an input of this command" "$tmp/err"
expect dump-over-model-file-intact cmp -s "$tmp/m.bin" "$tmp/ow/m.bin.keep"
check dump-over-weights 2 -- "$bin" generate --model "$tmp/ow/m" --steps 2 --dump-logits "$tmp/ow/m/model.safetensors"
check dump-over-hard-link 2 -- "$bin" generate --model "$tmp/ow/m" --steps 2 --dump-logits "$tmp/ow/hard"
check trace-over-symlinked-config 2 -- "$bin" generate --model "$tmp/ow/m" --steps 2 --trace "$tmp/ow/soft"
check dump-and-trace-one-file 2 -- "$bin" generate --model "$tmp/ow/m" --steps 2 --dump-logits "$tmp/ow/x" --trace "$tmp/ow/x"
check convert-onto-itself 2 -- "$bin" convert --from safetensors --to safetensors "$tmp/ow/m" "$tmp/ow/m/model.safetensors"
check convert-into-its-folder 2 -- "$bin" convert --from llama2c --to hf "$tmp/m.bin" "$tmp"
expect convert-into-its-folder-said grep -q "is the folder of an input" "$tmp/err"
expect overwrite-inputs-intact diff -r "$tmp/ow/m" "$tmp/ow/keep"
expect overwrite-model-intact cmp -s "$tmp/m.bin" "$tmp/ow/m.bin.keep"
check dump-beside-model 0 -- "$bin" generate --model "$tmp/ow/m" --steps 2 --dump-logits "$tmp/ow/m/logits.f32"
"$bin" generate --model builtin --steps 255 --mode eager --dump-logits "$tmp/h/int.bin" --trace "$tmp/h/int.json" \
  >/dev/null 2>&1 &
sleep 0.3
kill -INT $! 2>/dev/null
wait $! 2>/dev/null
expect interrupt-no-output test ! -e "$tmp/h/int.bin" -a ! -e "$tmp/h/int.json"
expect interrupt-no-temp nothing_left "$tmp/h"
"$bin" make-model --dim 512 --layers 8 --heads 8 --kv-heads 8 --hidden 1376 --vocab 32000 \
  --seq-len 256 --seed 1 --format safetensors --out "$tmp/h/mm/model.safetensors" >/dev/null 2>&1 &
sleep 0.5
kill -INT $! 2>/dev/null
wait $! 2>/dev/null
expect make-model-interrupt-no-temp nothing_left "$tmp/h/mm"
ln -s "$tmp/h/target" "$tmp/h/link"
check make-model-symlink 2 -- "$bin" make-model --dim 8 --layers 1 --heads 2 --kv-heads 2 --hidden 16 \
  --vocab 32 --seq-len 8 --seed 1 --format llama2c --out "$tmp/h/link"
expect make-model-symlink-said grep -q "not a regular file" "$tmp/err"
expect make-model-symlink-kept test -L "$tmp/h/link" -a ! -e "$tmp/h/target"
check make-model-device 2 -- "$bin" make-model --dim 8 --layers 1 --heads 2 --kv-heads 2 --hidden 16 \
  --vocab 32 --seq-len 8 --seed 1 --format llama2c --out /dev/full
expect make-model-device-kept test -c /dev/full
# stdout that cannot be written.
check stdout-full 2 -- bash -c "exec '$bin' generate --model '$tmp/m.bin' --steps 2 --print-ids >/dev/full"
expect stdout-full-said grep -q "cannot write to standard output" "$tmp/err"
check stdout-closed 2 -- bash -c "exec '$bin' generate --model '$tmp/m.bin' --steps 2 --print-ids >&-"
check ir-print-full 2 -- bash -c "exec '$bin' ir '$tmp/g.ir' --print >/dev/full"
# Flags.
check model-empty 2 -- "$bin" generate --model "" --steps 2
expect model-empty-said grep -q -- "--model: the value is empty" "$tmp/err"
check seed-negative 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --seed -1
check seed-too-large 2 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --seed 18446744073709551616
check seed-max 0 -- "$bin" generate --model "$tmp/m.bin" --steps 2 --seed 18446744073709551615 --print-ids
check passes-empty 2 -- "$bin" ir "$tmp/g.ir" --passes cse,,dce
expect passes-empty-said grep -q "empty pass name" "$tmp/err"
check passes-trailing 2 -- "$bin" ir "$tmp/g.ir" --passes cse,
# A file that cannot be read is "Permission denied", not "not found" (root
# reads anything: run as nobody where setpriv can drop to it).
cp "$tmp/m.bin" "$tmp/h/locked.bin"
chmod 000 "$tmp/h/locked.bin"
chmod 755 "$tmp" "$tmp/h"
as_user=()
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null &&
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$bin" generate --help >/dev/null 2>&1; then
  as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
if [[ $(id -u) != 0 || ${#as_user[@]} -gt 0 ]]; then
  check permission 2 -- "${as_user[@]}" "$bin" generate --model "$tmp/h/locked.bin" --steps 2
  expect permission-said grep -q "Permission denied" "$tmp/err"
fi
# The KV cache follows the work, not max_seq_len (a million positions allowed).
check big-seq-len 0 -- "$bin" make-model --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
  --vocab 64 --seq-len 1048576 --seed 3 --format llama2c --out "$tmp/h/long.bin"
check kv-cache-sized 0 -- "$bin" generate --model "$tmp/h/long.bin" --steps 4 --stats
expect kv-cache-bytes python3 -c "import json,sys; s=json.loads(open('$tmp/out').read().splitlines()[-1]); sys.exit(0 if s['kv_cache_bytes'] == 2*2*5*2*8*4 else 1)"

# --version: one line, "sinkgraph X.Y.Z".
check version 0 -- "$bin" --version
expect version-line grep -qxE 'sinkgraph [0-9]+\.[0-9]+\.[0-9]+' "$tmp/out"
expect version-one-line test "$(wc -l <"$tmp/out")" = 1
# --version and --help into a full device: exit 2, not a silent 0.
check version-to-full 2 -- bash -c "exec '$bin' --version >/dev/full"
check help-to-full 2 -- bash -c "exec '$bin' generate --help >/dev/full"
expect help-to-full-said grep -q "^error: cannot write to standard output" "$tmp/err"
# The option parser's errors: one line starting "error:", naming the flag and value.
for args in "generate --steps abc" "generate --bogus" "generate --steps" "frobnicate" ""; do
  # shellcheck disable=SC2086
  check "parse-error[$args]" 2 -- "$bin" $args
  expect "parse-error-one-line[$args]" test "$(wc -l <"$tmp/err")" = 1
  expect "parse-error-prefix[$args]" grep -q "^error: " "$tmp/err"
done
check parse-error-names-value 2 -- "$bin" generate --steps abc
expect parse-error-names-value-said grep -q -- "--steps: 'abc' is not a decimal integer" "$tmp/err"
# Note [One way to read a value]: every number is decimal and in range, as
# typed (not clamped); no value is empty; batch-only flags need
# --prompts-file. Each is one "error:" line naming the flag, exit 2.
value_case() {  # value_case NAME TEXT-EXPECTED -- args...
  local name=$1 said=$2
  shift 3
  check "value-$name" 2 -- "$bin" "$@"
  expect "value-$name-one-line" test "$(wc -l <"$tmp/err")" = 1
  expect "value-$name-said" grep -q -e "^error: .*$said" "$tmp/err"
}
m=(--model "$tmp/m.bin")
value_case steps-huge "--steps: 99999999999999999999999 is out of range" -- generate "${m[@]}" --steps 99999999999999999999999
value_case steps-hex "--steps: '0x10' is not a decimal integer" -- generate "${m[@]}" --steps 0x10
value_case steps-plus "--steps: '+3' is not a decimal integer" -- generate "${m[@]}" --steps +3
value_case prompt-ids-hex "--prompt-ids: '0x1' is not a decimal integer" -- generate "${m[@]}" --prompt-ids 0x1
value_case prompt-ids-huge "--prompt-ids: 99999999999999999999 is out of range" -- generate "${m[@]}" --prompt-ids 99999999999999999999
value_case stop-id-huge "--stop-id: 99999999999999999999 is out of range" -- generate "${m[@]}" --stop-id 99999999999999999999
value_case threads-huge "--threads must be from 1 to 1024, got 99999999999$" -- generate "${m[@]}" --threads 99999999999
value_case make-model-hex "--dim: '0x20' is not a decimal integer" -- make-model --dim 0x20 --layers 1 --heads 1 \
  --kv-heads 1 --hidden 8 --vocab 8 --seq-len 8 --seed 1 --format llama2c --out "$tmp/h/hex.bin"
value_case make-model-seed-negative "--seed: '-1' is not a decimal integer of 0 or more" -- make-model --dim 8 \
  --layers 1 --heads 1 --kv-heads 1 --hidden 8 --vocab 8 --seq-len 8 --seed -1 --format llama2c --out "$tmp/h/neg.bin"
value_case shards-hex "--shards: '0x2' is not a decimal integer" -- convert "$tmp/m.bin" "$tmp/h/hf" --to hf --shards 0x2
for v in nan inf -inf 1e999 abc ""; do
  value_case "temperature[$v]" "--temperature: " -- generate "${m[@]}" --temperature "$v"
done
for flag in --dump-logits --trace --prompts-file --capture-sizes --graph-memory-budget --prompt-ids --seed \
  --temperature --steps; do
  value_case "empty$flag" "$flag: the value is empty (leave the flag out" -- generate "${m[@]}" "$flag" "" --steps 2
done
# A flag given twice names the repetition and both values, as typed.
value_case repeated-steps "--steps is given 2 times ('3', '4'); give it once$" -- generate "${m[@]}" --steps 3 --steps 4
value_case repeated-make-model "--dim is given 2 times ('8', '9')" -- make-model --dim 8 --dim 9 --out "$tmp/h/rep.bin"
value_case empty-mode "--mode:  not in {eager,reduce-overhead,max-autotune}" -- generate "${m[@]}" --mode ""
# Note [One line per error]: a control character in a quoted path is escaped.
value_case path-newline 'a\\nb: cannot open the checkpoint' -- generate --model $'a\nb'
value_case path-tab 'a\\x09b: cannot open the checkpoint' -- generate --model $'a\tb'
value_case empty-positional "input: the value is empty (see --help)$" -- convert "" "$tmp/h/x" --to hf
for args in "--capture-sizes 1,2" "--max-batch 4" "--graph-memory-budget 1000" "--warmup-buckets"; do
  # shellcheck disable=SC2086
  value_case "batch-only[$args]" "acts only with --prompts-file" -- generate "${m[@]}" --steps 2 $args
done
expect no-dump-written test ! -e "$tmp/h/hf"

# The default model is the shipped stories260K: every mode reproduces its
# reference ids (models/stories260K/bos_greedy_200.txt, from llama2.c).
read -r -a shipped <"$src/models/stories260K/bos_greedy_200.txt"
for mode in eager reduce-overhead max-autotune; do
  check "default-model-$mode" 0 -- "$bin" generate --steps 200 --mode "$mode" --print-ids
  expect "default-model-$mode-ids" test "$(cat "$tmp/out")" = "ids: ${shipped[*]}"
done
check default-summary 0 -- "$bin" generate --steps 4
expect default-summary-names-model grep -q "^model: .*share/sinkgraph/stories260K/stories260K.bin" "$tmp/out"
check builtin 0 -- "$bin" generate --model builtin --steps 3 --print-ids --stats
expect builtin-vocab python3 -c "import json,sys; s=json.loads(open('$tmp/out').read().splitlines()[-1]); sys.exit(0 if s['generated_tokens'] == 3 else 1)"
check builtin-summary 0 -- "$bin" generate --model builtin --steps 3
expect builtin-summary-said grep -q "^model: built-in random (dim 288" "$tmp/out"

# --stream: the same ids line, written id by id; the host waits per token.
check stream 0 -- "$bin" generate --steps 12 --stream --print-ids --stats
expect stream-ids test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:12}"
expect stream-two-lines test "$(wc -l <"$tmp/out")" = 2
check stream-summary 0 -- "$bin" generate --steps 12 --stream --mode max-autotune
expect stream-summary-ids test "$(grep -c '^ids: ' "$tmp/out")" = 1
expect stream-summary-first test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:12}"
# ${shipped[6]} (378) first appears at index 6.
check stream-stop 0 -- "$bin" generate --steps 12 --stream --print-ids --stop-id "${shipped[6]}"
expect stream-stop-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:7}"

# --explain: decisions and one line per device graph; =full adds every node.
check explain-summary 0 -- "$bin" generate --steps 4 --explain --print-ids
cp "$tmp/err" "$tmp/explain_summary"
check explain-full 0 -- "$bin" generate --steps 4 --explain=full --print-ids
expect explain-summary-has-keys grep -q "key 0: .* nodes, captured in" "$tmp/explain_summary"
expect explain-summary-no-nodes bash -c "! grep -q 'device graph:' '$tmp/explain_summary'"
expect explain-full-has-nodes grep -q "device graph: .* nodes on 1 stream" "$tmp/err"
expect explain-full-longer test "$(wc -l <"$tmp/err")" -gt "$(($(wc -l <"$tmp/explain_summary") + 50))"
check explain-bad 2 -- "$bin" generate --steps 4 --explain=everything

# SINKGRAPH_LOG: info shows traces and captures as they happen; default warn.
check log-info 0 -- env SINKGRAPH_LOG=info "$bin" generate --steps 3 --print-ids
expect log-info-trace grep -q "^sinkgraph: info: function @decode: graph 0 traced: first call" "$tmp/err"
expect log-info-capture grep -q "^sinkgraph: info: graph @decode: call 1: capture: first call" "$tmp/err"
check log-default 0 -- env -u SINKGRAPH_LOG "$bin" generate --steps 3 --print-ids
expect log-default-quiet test ! -s "$tmp/err"
check log-bad 0 -- env SINKGRAPH_LOG=loud "$bin" generate --steps 3 --print-ids
expect log-bad-said grep -q "SINKGRAPH_LOG: unknown log level 'loud'" "$tmp/err"

# sinkgraph convert (docs/model.md): llama2.c to Hugging Face layout and back.
check convert 0 -- "$bin" convert --from llama2c "$tmp/m.bin" --to hf "$tmp/hf1"
expect convert-silent test ! -s "$tmp/out"
expect convert-files test -f "$tmp/hf1/model.safetensors" -a -f "$tmp/hf1/config.json"
check convert-ids 0 -- "$bin" generate --model "$tmp/hf1" --steps 5 --print-ids
expect convert-same-ids test "$(cat "$tmp/out")" = "$ids_ro"
check convert-sharded 0 -- "$bin" convert --from llama2c "$tmp/m.bin" --to hf "$tmp/hf2" --shards 2 --dtype bf16
expect convert-sharded-files test -f "$tmp/hf2/model.safetensors.index.json" -a -f "$tmp/hf2/model-00002-of-00002.safetensors"
check convert-sharded-loads 0 -- "$bin" generate --model "$tmp/hf2" --steps 5 --print-ids
check convert-back 0 -- "$bin" convert --from hf "$tmp/hf1" --to llama2c "$tmp/back.bin"
expect convert-back-bitwise cmp -s "$tmp/m.bin" "$tmp/back.bin"
check convert-from-mismatch 2 -- "$bin" convert --from safetensors "$tmp/hf1" --to hf "$tmp/x"
expect convert-from-mismatch-said grep -q "is a hf checkpoint, not safetensors" "$tmp/err"
check convert-shards-zero 2 -- "$bin" convert --from llama2c "$tmp/m.bin" --to hf "$tmp/x" --shards 0
check convert-shards-too-many 2 -- "$bin" convert --from llama2c "$tmp/m.bin" --to hf "$tmp/x" --shards 100
expect convert-shards-too-many-said grep -q "every shard needs at least one tensor" "$tmp/err"
check convert-shards-not-hf 2 -- "$bin" convert --from llama2c "$tmp/m.bin" --to safetensors "$tmp/x" --shards 2
check convert-dtype-llama2c 2 -- "$bin" convert --from hf "$tmp/hf1" --to llama2c "$tmp/x.bin" --dtype bf16
check convert-bad-format 2 -- "$bin" convert --from llama2c "$tmp/m.bin" --to onnx "$tmp/x"
check convert-missing 2 -- "$bin" convert --from llama2c "$tmp/nope.bin" --to hf "$tmp/x"
expect convert-missing-said grep -q "nope.bin" "$tmp/err"
expect convert-nothing-written test ! -e "$tmp/x" -a ! -e "$tmp/x.bin"
# GGUF (docs/model.md, "GGUF"): written in every type, read back by name or
# by its magic; f32 is the same model (same ids), bad files one error line.
for t in f32 f16 bf16 q8_0 q4_0; do
  check "convert-gguf-$t" 0 -- "$bin" convert --from llama2c "$tmp/m.bin" --to gguf "$tmp/m_$t.gguf" --dtype "$t"
  check "gguf-$t-runs" 0 -- "$bin" generate --model "$tmp/m_$t.gguf" --steps 5 --print-ids
done
check gguf-f32-ids 0 -- "$bin" generate --model "$tmp/m_f32.gguf" --steps 5 --print-ids
expect gguf-f32-same-ids test "$(cat "$tmp/out")" = "$ids_ro"
# --quantize computes on the same blocks the GGUF writer stores: the same ids.
for t in q8_0 q4_0; do
  check "gguf-$t-ids" 0 -- "$bin" generate --model "$tmp/m_$t.gguf" --steps 5 --print-ids
  cp "$tmp/out" "$tmp/ids_gguf_$t"
  check "quantize-$t" 0 -- "$bin" generate --model "$tmp/m.bin" --steps 5 --print-ids --quantize "$t"
  expect "quantize-$t-same-ids-as-gguf" cmp -s "$tmp/out" "$tmp/ids_gguf_$t"
done
check quantize-bad 2 -- "$bin" generate --model "$tmp/m.bin" --steps 5 --quantize q5_0
# Text in and out (Note [Text in and out] in generate_command.cpp): a GGUF file
# with a vocabulary encodes --prompt and the summary prints the text; a model
# without one refuses --prompt.
if "$src/.venv/bin/python" -c "import gguf" 2>/dev/null; then
  "$src/.venv/bin/python" "$src/tests/cli/gguf_add_vocab.py" "$tmp/m_f32.gguf" "$tmp/vocab.gguf"
  check prompt-text 0 -- "$bin" generate --model "$tmp/vocab.gguf" --prompt "hello the world" --steps 4
  expect prompt-text-said grep -q "^text: hello the world" "$tmp/out"
  check prompt-text-ids 0 -- "$bin" generate --model "$tmp/vocab.gguf" --prompt "hello" --steps 4 --print-ids
  expect prompt-text-ids-only test "$(wc -l <"$tmp/out")" = 1
  check prompt-and-ids 2 -- "$bin" generate --model "$tmp/vocab.gguf" --prompt "hello" --prompt-ids "1 2"
fi
check prompt-no-tokenizer 2 -- "$bin" generate --model "$tmp/m.bin" --prompt "hello" --steps 2
expect prompt-no-tokenizer-said grep -q "carries no tokenizer" "$tmp/err"
cp "$tmp/m_f32.gguf" "$tmp/gguf_no_suffix"
check gguf-by-magic 0 -- "$bin" generate --model "$tmp/gguf_no_suffix" --steps 5 --print-ids
expect gguf-by-magic-same-ids test "$(cat "$tmp/out")" = "$ids_ro"
check gguf-back-to-llama2c 0 -- "$bin" convert --from gguf "$tmp/m_f32.gguf" --to llama2c "$tmp/gguf_back.bin"
expect gguf-back-bitwise cmp -s "$tmp/m.bin" "$tmp/gguf_back.bin"
check gguf-quantized-needs-gguf 2 -- "$bin" convert --from llama2c "$tmp/m.bin" --to hf "$tmp/x" --dtype q8_0
expect gguf-quantized-needs-gguf-said grep -q "needs --to gguf" "$tmp/err"
head -c 3000 "$tmp/m_q8_0.gguf" > "$tmp/cut.gguf"
check gguf-truncated 2 -- "$bin" generate --model "$tmp/cut.gguf" --steps 2
expect gguf-truncated-one-line test "$(wc -l <"$tmp/err")" = 1
expect gguf-truncated-said grep -q "^error: .*cut.gguf: truncated" "$tmp/err"
printf 'GGUF\001\000\000\000' > "$tmp/v1.gguf"
check gguf-version-1 2 -- "$bin" generate --model "$tmp/v1.gguf" --steps 2
expect gguf-version-1-said grep -q "GGUF version 1; sinkgraph reads versions 2 and 3" "$tmp/err"

mkdir -p "$tmp/hfbad"
cp "$tmp/hf1/config.json" "$tmp/hfbad/"
python3 - "$tmp/hf2" "$tmp/hfbad" <<'PY'
import json, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
index = json.load(open(f"{src}/model.safetensors.index.json"))
for f in set(index["weight_map"].values()):
    shutil.copy(f"{src}/{f}", f"{dst}/{f}")
index["weight_map"]["model.norm.weight"] = "../model-00002-of-00002.safetensors"
json.dump(index, open(f"{dst}/model.safetensors.index.json", "w"))
PY
check convert-index-escape 2 -- "$bin" generate --model "$tmp/hfbad" --steps 2
expect convert-index-escape-said grep -q "not a plain file name" "$tmp/err"

# max-autotune's generated code and its compile cache, across processes
# (Note [Compile cache]): cold, warm, a corrupt entry, no compiler, a folder
# others may write to. Every run still produces the reference ids.
cache="$tmp/cache"
stat_of() { python3 -c "import json,sys; print(json.loads(open('$tmp/out').read().splitlines()[-1])['$1'])"; }
check codegen-cold 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids --stats
expect codegen-cold-ids test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect codegen-kernels test "$(stat_of codegen_kernels)" -ge 1
cold_hits=$(stat_of compile_cache_hits)
expect codegen-cache-private test "$(stat -c %a "$cache")" = 700
objects=$(ls "$cache"/*.so | wc -l)
check codegen-warm 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids --stats
expect codegen-warm-ids test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect codegen-warm-hits test "$(stat_of compile_cache_hits)" -gt "$cold_hits"
expect codegen-warm-compiles-nothing test "$(ls "$cache"/*.so | wc -l)" = "$objects"
# The post-pass graphs were saved beside the code (Note [Saved graphs]): a
# restart loads them instead of tracing; a bad file is traced around.
expect saved-graphs-written test "$(ls "$cache"/*.graphs.json | wc -l)" = 2
check saved-graphs-loaded 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids --explain
expect saved-graphs-loaded-ids test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect saved-graphs-loaded-said grep -q "loaded from $cache/" "$tmp/out" "$tmp/err"
for g in "$cache"/*.graphs.json; do echo '{"format": "sinkgraph.saved_graphs"' >"$g"; done
check saved-graphs-corrupt 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids
expect saved-graphs-corrupt-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect saved-graphs-corrupt-said grep -q "ignoring saved graphs" "$tmp/err"
for so in "$cache"/*.so; do echo "not an ELF object" >"$so"; done
check codegen-corrupt 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids
expect codegen-corrupt-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect codegen-corrupt-said grep -q "corrupt cache entry" "$tmp/err"
check codegen-no-compiler 0 -- env SINKGRAPH_CACHE_DIR="$tmp/cache2" SINKGRAPH_CXX=/nonexistent/c++ "$bin" generate --steps 8 --mode max-autotune --print-ids --stats
expect codegen-no-compiler-ids test "$(head -n 1 "$tmp/out")" = "ids: ${shipped[*]:0:8}"
expect codegen-no-compiler-said grep -q "'/nonexistent/c++' was not found" "$tmp/err"
expect codegen-no-compiler-kernels test "$(stat_of codegen_kernels)" = 0
chmod 777 "$cache"
check codegen-shared-folder 0 -- env SINKGRAPH_CACHE_DIR="$cache" "$bin" generate --steps 8 --mode max-autotune --print-ids
expect codegen-shared-folder-said grep -q "is not private to this user" "$tmp/err"
expect codegen-shared-folder-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:8}"

# The shared reference model, when present.
if [[ -f $shared/stories260K.bin ]]; then
  check stories 0 -- "$bin" generate --model "$shared/stories260K.bin" --steps 200 --print-ids
  expect stories-greedy test "$(cut -d' ' -f2- "$tmp/out")" = "$(tr -s ' \n' ' ' <"$shared/bos_greedy_200.txt" | sed 's/ $//')"
  # Converted to Hugging Face layout (3 shards), every mode keeps the reference ids.
  check stories-convert 0 -- "$bin" convert --from llama2c "$shared/stories260K.bin" --to hf "$tmp/hfs" --shards 3
  for mode in eager reduce-overhead max-autotune; do
    check "stories-hf-$mode" 0 -- "$bin" generate --model "$tmp/hfs" --steps 200 --print-ids --mode "$mode"
    expect "stories-hf-$mode-greedy" test "$(cut -d' ' -f2- "$tmp/out")" = "$(tr -s ' \n' ' ' <"$shared/bos_greedy_200.txt" | sed 's/ $//')"
  done
  # HF's own math (rotate_half) on the converted files, with the project venv's torch.
  if "$src/.venv/bin/python" -c "import torch" 2>/dev/null; then
    check stories-hf-torch-reference 0 -- "$src/.venv/bin/python" "$src/tests/models/hf_reference.py" \
      "$tmp/hfs" "$shared/bos_greedy_200.txt" "$shared/bos_logits_64x512.f32"
  else
    echo "skipped: the HF torch reference (no .venv with torch)"
  fi
else
  echo "skipped: $shared is absent (the shared reference model)"
fi

finish cli
