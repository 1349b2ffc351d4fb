# The command-line tests' helpers, sourced by cli_test.sh and
# tensor_parallel_test.sh: a temporary folder ($tmp, removed at exit) and
# pass/fail counters. `check` runs a command with stdout and stderr in
# $tmp/out and $tmp/err and compares its exit status; `expect` counts a
# condition; `finish` prints the totals and fails when any check failed.
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

finish() {  # finish SUITE
  echo "$1: $pass passed, $fail failed"
  [[ $fail == 0 ]]
}
