#!/usr/bin/env bash
# Runs the integration tests (test/integration) under the race detector in
# two shards side by side, and the fixed chaos seeds (test/chaos, docs/chaos.md)
# after the shorter shard 1, beside shard 2. Most of their time is waiting
# (grace periods, tolerations, timelines), not computing, so two control
# planes at once roughly halve the wall time on 2 cores; shard 1 ends about
# 7 minutes before shard 2, and the three seeds take about 3, so they cost
# no wall time. Each job logs to its own file, streamed here as it grows;
# the exit status is non-zero if any failed (a chaos seed fails on any
# invariant violation).
#
#   hack/test-integration.sh [-v]     (make test-integration; make test)
#   CHAOS_SEEDS=1,2,3 CHAOS_DURATION=45s (the defaults; CHAOS_SEEDS= skips them)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

verbose=()
for a in "$@"; do
  case "$a" in
    -v) verbose=(-test.v) ;;
    *) echo "test-integration: unknown argument $a (only -v)" >&2; exit 2 ;;
  esac
done

# Shard 1: simulate (and scenario snapshot), the scheduler (and explain pod) and the CLI; shard 2: everything else.
# A test belongs to exactly one shard (shard 2 skips what shard 1 runs).
shard1='^(TestExampleScenarios|TestSimulate.*|TestPreemptionSameAsKubeScheduler|TestScheduler.*|TestDemo|TestLocalCluster|TestBadInputExitsWithCode2|TestRuntimeErrorsExitWithCode1|TestHelpIsAvailableForEveryCommand|TestExplainPod|TestScenarioSnapshot.*)$'

chaos_seeds=${CHAOS_SEEDS-1,2,3}
chaos_duration=${CHAOS_DURATION:-45s}

mkdir -p bin
testbin="$root/bin/integration.test"
chaosbin="$root/bin/chaos.test"
echo "test-integration: building the race-enabled test binaries"
go test -race -c -o "$testbin" ./test/integration || exit 1
go test -race -c -o "$chaosbin" ./test/chaos || exit 1
# The tests build bin/nodeshepherd once (make build); do it before the
# shards start so that they do not build it at the same time.
make --no-print-directory build >/dev/null || exit 1

logdir=$(mktemp -d /tmp/nodeshepherd-integration.XXXXXX)
start=$(date +%s)
run_shard() { # name, then the test binary's selection flags
  local name=$1; shift
  (cd test/integration && "$testbin" -test.count=1 -test.timeout=40m "${verbose[@]}" "$@") >"$logdir/$name.log" 2>&1
  echo $? >"$logdir/$name.rc"
}
run_chaos() { # the fixed seeds, one after another (each on a fresh cluster)
  if [ -z "$chaos_seeds" ]; then
    echo "chaos seeds skipped (CHAOS_SEEDS is empty)" >"$logdir/chaos.log"
    echo 0 >"$logdir/chaos.rc"
    return
  fi
  (cd test/chaos && "$chaosbin" -test.count=1 -test.timeout=30m -test.v -test.run '^TestChaos$' \
    -seed="$chaos_seeds" -duration="$chaos_duration" -out "$logdir/chaos-timelines") >"$logdir/chaos.log" 2>&1
  echo $? >"$logdir/chaos.rc"
}
{ run_shard shard1 -test.run "$shard1"; run_chaos; } &
p1=$!
run_shard shard2 -test.skip "$shard1" &
p2=$!
touch "$logdir/shard1.log" "$logdir/shard2.log" "$logdir/chaos.log"
tail -q -n +1 -f "$logdir/shard1.log" "$logdir/shard2.log" "$logdir/chaos.log" &
tailpid=$!
trap 'kill $p1 $p2 $tailpid 2>/dev/null' INT TERM
wait $p1 $p2
sleep 1 # let tail print the last lines
kill $tailpid 2>/dev/null
status=0
for s in shard1 shard2 chaos; do
  rc=$(cat "$logdir/$s.rc" 2>/dev/null || echo 1)
  if [ "$rc" -ne 0 ]; then
    echo "test-integration: $s FAILED (exit $rc); its whole log: $logdir/$s.log"
    status=1
  else
    echo "test-integration: $s ok"
  fi
done
echo "test-integration: $(( $(date +%s) - start ))s for both shards and the chaos seeds"
exit $status
