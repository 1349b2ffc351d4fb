#!/usr/bin/env bash
# `mpirun -np N sinkgraph generate --tensor-parallel N`: the ids, stdout and
# --stats rules, each rank's share of the weights, errors on every rank, and
# a failed, killed or hung rank ending the job (Note [Tensor-parallel generate] in
# tools/generate_command.cpp). ctest runs it in the presets built with MPI.
# Usage: tensor_parallel_test.sh path/to/sinkgraph source_dir mpiexec
set -uo pipefail
bin=$1
src=$2
mpiexec=$3
mpi=("$mpiexec" --oversubscribe --bind-to none)
# shellcheck source=checks.sh
source "$(dirname "$0")/checks.sh"

json_key() {  # json_key FILE KEY: the value of KEY in the JSON line FILE
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# The shipped stories260K: every mode reproduces the reference ids from two
# shards, and rank 0 alone prints (one stdout line).
read -r -a shipped <"$src/models/stories260K/bos_greedy_200.txt"
for mode in eager reduce-overhead max-autotune; do
  check "tp2-$mode" 0 -- "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --steps 200 \
    --mode "$mode" --print-ids
  expect "tp2-$mode-ids" test "$(cat "$tmp/out")" = "ids: ${shipped[*]}"
done
check tp4 0 -- "${mpi[@]}" -np 4 "$bin" generate --tensor-parallel 4 --steps 32 --print-ids
expect tp4-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:32}"

# --stats: tp_size and weight_bytes in every run; a rank holds <= 0.6x the
# weights of one process.
check stats-one 0 -- "$bin" generate --steps 4 --stats
cp "$tmp/out" "$tmp/one.json"
expect stats-one-tp-size test "$(json_key "$tmp/one.json" tp_size)" = 1
check stats-tp2 0 -- "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --steps 4 --stats
expect stats-tp2-one-line test "$(wc -l <"$tmp/out")" = 1
cp "$tmp/out" "$tmp/two.json"
expect stats-tp2-tp-size test "$(json_key "$tmp/two.json" tp_size)" = 2
expect stats-tp2-share test $((10 * $(json_key "$tmp/two.json" weight_bytes))) -le \
  $((6 * $(json_key "$tmp/one.json" weight_bytes)))
expect stats-tp2-rank0-graphs test "$(json_key "$tmp/two.json" decode_captured)" = 1

# The summary (no --print-ids or --stats) is rank 0's alone: the lines one
# process prints, once (timings, pools and memory differ).
check summary-one 0 -- "$bin" generate --steps 8
sed -E 's/^(prefill|decode|graphs|peak allocated):.*/\1:/' "$tmp/out" >"$tmp/summary-one"
check summary-tp2 0 -- "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --steps 8
sed -E 's/^(prefill|decode|graphs|peak allocated):.*/\1:/' "$tmp/out" >"$tmp/summary-two"
expect summary-tp2-same-lines diff "$tmp/summary-one" "$tmp/summary-two"
expect summary-tp2-graphs grep -q '^graphs: 2 captured (prefill 1, decode 1)' "$tmp/out"

# Each rank loads its shard of a Hugging Face checkpoint in three files
# (half-style rope, rows and columns sliced from the mapped shards).
check convert-hf 0 -- "$bin" convert --from llama2c "$src/models/stories260K/stories260K.bin" \
  --to hf "$tmp/hf" --shards 3
check tp2-hf 0 -- "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --model "$tmp/hf" \
  --steps 64 --print-ids --mode max-autotune
expect tp2-hf-ids test "$(cat "$tmp/out")" = "ids: ${shipped[*]:0:64}"

# Batched decoding under tensor parallelism: the same ids as one process.
printf '1\n1 461 461\n1 401\n' >"$tmp/prompts"
check batch-one 0 -- "$bin" generate --prompts-file "$tmp/prompts" --steps 12 --max-batch 2 --print-ids
cp "$tmp/out" "$tmp/batch-one"
check batch-tp2 0 -- "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --prompts-file \
  "$tmp/prompts" --steps 12 --max-batch 2 --print-ids
expect batch-tp2-ids diff "$tmp/batch-one" "$tmp/out"

# Errors: N must be the world size, said by every rank; a split that breaks
# heads; --tensor-parallel without mpirun.
check tp-mismatch 2 -- timeout 60 "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 3 --steps 4
expect tp-mismatch-every-rank test "$(grep -c 'must equal the MPI world size, 2' "$tmp/err")" = 2
expect tp-mismatch-no-stdout test ! -s "$tmp/out"
check tp-heads 2 -- timeout 60 "${mpi[@]}" -np 3 "$bin" generate --tensor-parallel 3 --steps 4
expect tp-heads-message grep -q 'each rank holds whole heads' "$tmp/err"
check tp-no-mpirun 2 -- timeout 60 "$bin" generate --tensor-parallel 2 --steps 4
expect tp-no-mpirun-message grep -q 'start it as mpirun -np N' "$tmp/err"

# One rank with bad input (a truncated checkpoint) while the other loads
# and enters its first collective: the job ends with an error at once.
head -c 100000 "$src/models/stories260K/stories260K.bin" >"$tmp/truncated.bin"
check one-bad-rank 2 -- timeout 60 "${mpi[@]}" -np 1 "$bin" generate --tensor-parallel 2 --steps 64 \
  : -np 1 "$bin" generate --tensor-parallel 2 --model "$tmp/truncated.bin" --steps 64
expect one-bad-rank-message grep -q 'truncated.bin: tensor token_embedding needs' "$tmp/err"

# A long decode for the failure tests below: started in the background
# ($job), it returns once rank 1 is found ($victim) and rank 0 has streamed
# ids. Extra VAR=VALUE arguments go into the job's environment. The decode
# must outlast any scheduling delay: 8000 steps took under 2 s on a quiet
# machine, and once, on a loaded one, mpirun forwarded the first ids only as
# the job ended, so rank 1 was gone before it was looked for. 60000 steps
# over a growing context take minutes; the tests end the job long before.
check make-long 0 -- "$bin" make-model --dim 128 --layers 2 --heads 4 --kv-heads 4 --hidden 256 \
  --vocab 512 --seq-len 65536 --seed 1 --format llama2c --out "$tmp/long.bin"
start_long_run() {  # start_long_run OUT ERR [VAR=VALUE...]
  local out=$1 err=$2
  shift 2
  env "$@" "${mpi[@]}" -np 2 "$bin" generate --tensor-parallel 2 --model "$tmp/long.bin" \
    --steps 60000 --stream --print-ids >"$out" 2>"$err" &
  job=$!
  victim=""
  for _ in $(seq 600); do
    if [[ -z $victim ]]; then
      for p in $(pgrep -P "$job"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
      done
    fi
    [[ -n $victim && $(wc -c <"$out") -gt 40 ]] && break
    sleep 0.1
  done
}
# Sends SIGNAL to rank 1 and waits for the job to end, at most 30 s (then
# kills it, and the bound check fails); sets $status and $took.
signal_rank1_and_wait() {  # signal_rank1_and_wait SIGNAL
  local start=$SECONDS
  [[ -n $victim ]] && kill "-$1" "$victim"
  while kill -0 "$job" 2>/dev/null && ((SECONDS - start < 30)); do sleep 0.1; done
  kill -9 "$job" 2>/dev/null
  wait "$job"
  status=$?
  took=$((SECONDS - start))
}

# Kill test: rank 1 killed with SIGKILL mid-decode (once rank 0 has streamed
# ids); mpirun must end the job with an error within 30 s.
start_long_run "$tmp/kill-out" "$tmp/kill-err"
expect kill-found-rank1 test -n "$victim"
expect kill-mid-run test "$(wc -c <"$tmp/kill-out")" -gt 40
signal_rank1_and_wait KILL
expect kill-job-failed test "$status" -ne 0
expect kill-bounded test "$took" -lt 30
expect kill-did-not-finish test "$(wc -w <"$tmp/kill-out")" -lt 60001

# Hung-rank test: rank 1 stopped (SIGSTOP) mid-decode is not seen by mpirun;
# rank 0's collective watchdog (SINKGRAPH_DIST_TIMEOUT, 3 s here) ends the
# job, names the wait, and the stopped rank does not blame the others.
# Rank 1 stops at a random point of a step, so rank 0 waits in whichever
# collective rank 1 has not reached: a layer's all_reduce or the split
# classifier's all_gather.
start_long_run "$tmp/hang-out" "$tmp/hang-err" SINKGRAPH_DIST_TIMEOUT=3
expect hang-found-rank1 test -n "$victim"
signal_rank1_and_wait STOP
[[ -n $victim ]] && kill -CONT "$victim" 2>/dev/null && kill -9 "$victim" 2>/dev/null
expect hang-job-failed test "$status" -ne 0
expect hang-bounded test "$took" -lt 30
expect hang-rank0-reports grep -Eq \
  'rank 0 waited .* in MPI_All(reduce|gather) \(group 0\), longer than SINKGRAPH_DIST_TIMEOUT=3 s' \
  "$tmp/hang-err"
expect hang-only-rank0-reports test "$(grep -c 'waited .* longer than' "$tmp/hang-err")" = 1

# A timeout that is not a number of seconds: exit 2, said by every rank.
check bad-timeout 2 -- env SINKGRAPH_DIST_TIMEOUT=soon timeout 60 "${mpi[@]}" -np 2 "$bin" \
  generate --tensor-parallel 2 --steps 4
expect bad-timeout-every-rank test "$(grep -c 'SINKGRAPH_DIST_TIMEOUT="soon" is not' "$tmp/err")" = 2

finish "tensor parallel cli"
