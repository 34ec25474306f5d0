#!/usr/bin/env bash
# Runs `make test` several times in a row while a CPU-heavy job (by default
# `make test-unit`, in a loop) runs beside it: the busy CI box that a test
# with a deadline for a fast machine, a race with the harness or a shared
# port fails on (issue 31). Every run goes on even if one fails; the exit
# status is non-zero if any did, or if a round of the load did. The load loop is stopped at the end, also
# on failure or Ctrl-C.
#
#   make test-loaded                          (3 runs of make test, make test-unit beside)
#   LOADED_RUNS=5 make test-loaded
#   LOADED_CPUS=0,1 make test-loaded          (pin both to 2 CPUs, taskset, on a bigger machine)
#   LOADED_CMD='make test-unit' LOADED_LOAD='make test-unit' make test-loaded
#
# Logs: one file per run and the load's in LOADED_LOG_DIR (default a new
# directory under /tmp, printed).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

runs=${LOADED_RUNS:-3}
cmd=${LOADED_CMD:-make --no-print-directory test}
# The load's unit-test binaries live apart from make test's, which it would
# otherwise relink while they run.
load=${LOADED_LOAD:-UNIT_BIN_DIR=$root/bin/unit-tests-load make --no-print-directory test-unit}
cpus=${LOADED_CPUS:-}
logdir=${LOADED_LOG_DIR:-$(mktemp -d /tmp/nodeshepherd-loaded.XXXXXX)}
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "test-loaded: LOADED_RUNS=$runs is not a positive number of runs" >&2
  exit 2
fi
mkdir -p "$logdir" || exit 1
pin=()
if [ -n "$cpus" ]; then
  command -v taskset >/dev/null || { echo "test-loaded: LOADED_CPUS needs taskset (util-linux)" >&2; exit 2; }
  pin=(taskset -c "$cpus")
fi

# The load runs in a session of its own so that stopping it stops all its
# processes (make, go test, the test binaries), and nothing else.
# Each round of the load is a test run too: a round that fails is noted
# (load.failures) and fails test-loaded, with its failures printed at the
# end. A round cut short by the stop at the end is not counted.
: >"$logdir/load.failures"
setsid "${pin[@]}" bash -c "i=0; while :; do i=\$((i + 1)); echo \"=== load round \$i\"; $load || echo \"round \$i exit \$?\" >>'$logdir/load.failures'; done" >"$logdir/load.log" 2>&1 &
loadpid=$!
stop_load() {
  if kill -0 "$loadpid" 2>/dev/null; then
    kill -TERM -- "-$loadpid" 2>/dev/null
    wait "$loadpid" 2>/dev/null
    echo "test-loaded: load stopped"
  fi
}
trap stop_load EXIT
trap 'exit 130' INT TERM

echo "test-loaded: $runs x '$cmd' beside '$load' in a loop (pid $loadpid)${cpus:+, on CPUs $cpus}; $(nproc) CPUs; logs in $logdir"
failed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  "${pin[@]}" bash -c "$cmd" >"$logdir/run-$i.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "test-loaded: run $i/$runs passed in ${took}s"
  else
    failed=$((failed + 1))
    echo "test-loaded: run $i/$runs FAILED (exit $rc) in ${took}s; failures:"
    grep -E -- '^(--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$logdir/run-$i.log" | head -40 | sed 's/^/  /'
  fi
done
stop_load
# The last round was stopped, not failed: only rounds noted before the stop count.
rounds=$(grep -c '^=== load round' "$logdir/load.log")
loadfailed=$(grep -c . "$logdir/load.failures")
if [ "$loadfailed" -gt 0 ]; then
  # The stop at the end may have failed the last round: it does not count.
  last=$(tail -n1 "$logdir/load.failures" | awk '{print $2}')
  [ "$last" = "$rounds" ] && loadfailed=$((loadfailed - 1))
fi
echo "test-loaded: the load ran $rounds rounds of '$load'; $loadfailed failed"
if [ "$loadfailed" -gt 0 ]; then
  echo "test-loaded: failures of the load (all in $logdir/load.log):"
  grep -E -- '^(--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$logdir/load.log" | head -40 | sed 's/^/  /'
fi
echo "test-loaded: $((runs - failed)) passed, $failed failed"
[ "$loadfailed" -eq 0 ] || echo "test-loaded: FAILED: $loadfailed rounds of the load failed"
[ $failed -eq 0 ] && [ "$loadfailed" -eq 0 ]
