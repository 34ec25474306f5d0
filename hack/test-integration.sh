#!/usr/bin/env bash
# Runs the integration tests (test/integration) under the race detector in
# SHARDS processes side by side (default 6), and the fixed chaos seeds
# (test/chaos, docs/chaos.md) at the start of one of them. Most of the tests'
# time is waiting (grace periods, tolerations, timelines): with four shards
# the two cores were still about half idle (/proc/stat) and a warm make test
# took 18.7 min; with six 15.3 min, the cores about 37 % idle (2026-11-29).
#
# The tests are split by their durations in the last run (bin/integration-times,
# written at the end of every full run; hack/integration-times.txt, committed,
# before the first), longest first, each to the shard with the least work so
# far, so that the shards end together. A test that neither file knows counts
# 30 s. Every shard keeps one spare control plane starting in the background
# (test/framework/spare.go), so that its next test does not wait for one.
#
# The terminal shows one line per finished test and the whole output of a
# failed one; each shard's full log (-test.v) is kept in a directory under
# /tmp, named at the end.
#
#   hack/test-integration.sh [-v]     (make test-integration; make test)
#   SHARDS=6; CHAOS_SEEDS=1,2,3 CHAOS_DURATION=45s (the defaults; CHAOS_SEEDS= skips them)
set -uo pipefail
export LC_NUMERIC=C # $EPOCHREALTIME with a decimal point
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

verbose=0
for a in "$@"; do
  case "$a" in
    -v) verbose=1 ;;
    *) echo "test-integration: unknown argument $a (only -v)" >&2; exit 2 ;;
  esac
done
shards=${SHARDS:-6}
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "test-integration: SHARDS=$shards: want a positive number" >&2; exit 2; }
chaos_seeds=${CHAOS_SEEDS-1,2,3}
chaos_duration=${CHAOS_DURATION:-45s}

# The control planes, the test binaries and nodeshepherd spend less CPU on
# garbage collection with a larger heap goal (24 GiB here; kube-apiserver's
# CPU until /readyz went from 1.37 to 1.12 s, its peak RSS from 266 to
# 367 MB). GOGC= keeps Go's default.
export GOGC=${GOGC-400}

mkdir -p bin
testbin="$root/bin/integration.test"
chaosbin="$root/bin/chaos.test"
echo "test-integration: building the race-enabled test binaries and nodeshepherd"
# The tests run the shipped binary (make build) and, for the failover tests,
# one with fault hooks (GO_BUILD_TAGS=faulthook). Build both once here for
# every test process (test/framework reads their paths from the variables)
# instead of once per process; all four builds at once, since each ends in
# a link that keeps one core busy.
make --no-print-directory build >/dev/null &
build1=$!
make --no-print-directory build BIN="$root/bin/faulthook" GO_BUILD_TAGS=faulthook >/dev/null &
build2=$!
# One call writes bin/integration.test and bin/chaos.test.
go test -race -c -o "$root/bin/" ./test/integration ./test/chaos || { wait; exit 1; }
wait "$build1" || exit 1
wait "$build2" || exit 1
export NODESHEPHERD_TEST_BINARY="$root/bin/nodeshepherd" NODESHEPHERD_TEST_FAULT_BINARY="$root/bin/faulthook/nodeshepherd"

mapfile -t tests < <(cd test/integration && "$testbin" -test.list '.*' | grep '^Test')
[ ${#tests[@]} -gt 0 ] || { echo "test-integration: the test binary lists no tests" >&2; exit 1; }
# TestExampleScenarios runs every file of examples/scenarios, one subtest
# each, about 11 minutes in all: its subtests are split among the shards
# like tests (TestExampleScenarios/NAME), so that it does not set the pace.
split=TestExampleScenarios
mapfile -t tests < <(printf '%s\n' "${tests[@]}" | grep -vx "$split")
for f in examples/scenarios/*.yaml; do
  n=${f##*/}
  tests+=("$split/${n%.yaml}")
done

# Durations: "seconds name" lines; the last run's first, then the committed ones.
times="$root/bin/integration-times"
declare -A dur=()
for f in hack/integration-times.txt "$times"; do
  [ -f "$f" ] || continue
  while read -r s n; do [[ -n "${n:-}" && "$s" != \#* ]] && dur[$n]=$s; done <"$f"
done
items=("${tests[@]}")
[ -n "$chaos_seeds" ] && items+=(chaos)
mapfile -t order < <(for n in "${items[@]}"; do
  [ -n "$n" ] || continue
  d=${dur[$n]:-}
  [ -n "$d" ] || { [ "$n" = chaos ] && d=240 || d=30; }
  echo "$d $n"
done | sort -s -k1,1 -rn)

# Longest first, each to the shard with the least work so far. The example
# scenarios and the chaos seeds mostly wait (timelines in scaled real time),
# the other tests mostly compute: the waiting goes to the odd shards, which
# run it first, so that it overlaps the computing and the run ends with
# every shard computing, never with the cores idle while timelines play out.
declare -a load=() list=() sub=()
chaos_shard=-1
for ((i = 0; i < shards; i++)); do load[$i]=0; list[$i]=""; sub[$i]=""; done
for l in "${order[@]}"; do
  read -r d n <<<"$l"
  first=0 step=1
  case "$n" in chaos | "$split"/*) [ "$shards" -gt 1 ] && first=1 step=2 ;; esac
  best=$first
  for ((i = first + step; i < shards; i += step)); do
    awk -v a="${load[$i]}" -v b="${load[$best]}" 'BEGIN { exit !(a < b) }' && best=$i
  done
  load[$best]=$(awk -v a="${load[$best]}" -v b="$d" 'BEGIN { print a + b }')
  case "$n" in
    chaos) chaos_shard=$best ;;
    "$split"/*) sub[$best]+="${sub[$best]:+|}${n#"$split"/}" ;;
    *) list[$best]+="${list[$best]:+|}$n" ;;
  esac
done

logdir=$(mktemp -d /tmp/nodeshepherd-integration.XXXXXX)
start=$(date +%s)
# A -test.run pattern's second part would filter every test's subtests:
# the scenarios run in a process of their own.
run_tests() { # index
  [ -z "${list[$1]}" ] || run_binary "$1" -test.run "^(${list[$1]})\$"
}
run_scenarios() { # index
  [ -z "${sub[$1]}" ] || run_binary "$1" -test.run "^$split\$/^(${sub[$1]})\$"
}
# run_binary INDEX ARGS: the test binary, its output appended to the shard's
# log. The durations for the next split are wall times, from one test's
# "=== RUN" to the next's (shardN.starts): go test's own figure for a test
# leaves out its parallel subtests (TestStuckControllerGivesUpLease said 5 s
# and ran 155), which made one shard end minutes after the others.
run_binary() {
  local i=$1
  shift
  (cd test/integration && "$testbin" -test.count=1 -test.timeout=40m -test.v "$@") 2>&1 | stamp "$logdir/shard$i.starts" >>"$logdir/shard$i.log"
  local rc=${PIPESTATUS[0]}
  echo "$EPOCHREALTIME END" >>"$logdir/shard$i.starts"
  return "$rc"
}
# stamp FILE: copies its input and notes in FILE when each top-level test
# (and each example scenario) starts.
stamp() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    case "$line" in
      "=== RUN   $split/"*/*) ;;
      "=== RUN   $split/"*) echo "$EPOCHREALTIME ${line#=== RUN   }" >>"$1" ;;
      "=== RUN   Test"*/*) ;;
      "=== RUN   Test"*) echo "$EPOCHREALTIME ${line#=== RUN   }" >>"$1" ;;
    esac
  done
}
# The waiting first (chaos seeds, scenarios), then the computing. When
# every shard ran its tests first and its scenarios last, the two cores
# were overloaded at first and nearly idle for the last five minutes.
run_shard() { # index
  local i=$1
  local rc=0
  if [ "$i" -eq "$chaos_shard" ]; then run_chaos; fi
  run_scenarios "$i" || rc=1
  run_tests "$i" || rc=1
  echo $rc >"$logdir/shard$i.rc"
}
run_chaos() { # the fixed seeds, one after another (each on a fresh cluster)
  (cd test/chaos && "$chaosbin" -test.count=1 -test.timeout=30m -test.v -test.run '^TestChaos$' \
    -seed="$chaos_seeds" -duration="$chaos_duration" -out "$logdir/chaos-timelines") >"$logdir/chaos.log" 2>&1
  echo $? >"$logdir/chaos.rc"
}
# show FILE PID: what the terminal shows of a log while PID runs. With -v
# everything; else each test's end line, the whole output of a failed test
# (and everything after a panic), and the final PASS/FAIL.
show() {
  if [ "$verbose" -eq 1 ]; then
    tail --pid="$2" -n +1 -f "$1"
    return
  fi
  tail --pid="$2" -n +1 -f "$1" | awk '
    panicked { print; fflush(); next }
    /^panic:/ { panicked = 1; printf "%s", buf; print; fflush(); next }
    /^=== RUN   Test[^\/]*$/ { buf = "" }
    { buf = buf $0 "\n" }
    /^--- (PASS|SKIP)/ { print; fflush(); buf = ""; next }
    /^--- FAIL/ { printf "%s", buf; fflush(); buf = ""; next }
    /^(PASS|FAIL|ok)$/ { print; fflush() }'
}
pids=()
shows=()
for ((i = 0; i < shards; i++)); do
  : >"$logdir/shard$i.log"
  n=$(tr '|' '\n' <<<"${list[$i]}" | grep -c .)
  m=$(tr '|' '\n' <<<"${sub[$i]}" | grep -c .)
  echo "test-integration: shard $i: $n tests and $m example scenarios, about ${load[$i]%.*}s by the last durations$([ "$i" -eq "$chaos_shard" ] && echo ", chaos seeds $chaos_seeds first")"
  [ "$i" -eq "$chaos_shard" ] && : >"$logdir/chaos.log"
  run_shard "$i" &
  pids+=($!)
  show "$logdir/shard$i.log" $! &
  shows+=($!)
  if [ "$i" -eq "$chaos_shard" ]; then
    show "$logdir/chaos.log" "${pids[$i]}" &
    shows+=($!)
  fi
done
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM
wait "${pids[@]}"
wait "${shows[@]}" # each ends within a second of its shard

status=0
names=()
for ((i = 0; i < shards; i++)); do names+=("shard$i"); done
[ "$chaos_shard" -ge 0 ] && names+=(chaos)
for s in "${names[@]}"; do
  rc=$(cat "$logdir/$s.rc" 2>/dev/null || echo 1)
  if [ "$rc" -ne 0 ]; then
    echo "test-integration: $s FAILED (exit $rc); its whole log: $logdir/$s.log"
    status=1
  else
    echo "test-integration: $s ok"
  fi
done

# Keep the durations of a full run for the next split (a failed test's too:
# it ran as long as it did).
new=$(for f in "$logdir"/shard*.starts; do
  [ -f "$f" ] || continue
  # "time name" lines, "time END" after each process: a test lasted until the next line.
  awk 'prev != "" && prev != "END" { printf "%.2f %s\n", $1 - t, prev } { t = $1; prev = $2 }' "$f"
done)
if [ -n "$new" ]; then
  {
    echo "$new"
    if [ -n "$chaos_seeds" ] && [ -f "$logdir/chaos.log" ]; then
      sed -nE 's/^--- (PASS|FAIL): TestChaos \(([0-9.]+)s\)$/\2 chaos/p' "$logdir/chaos.log"
    fi
  } >"$times.new" && mv "$times.new" "$times"
fi
echo "test-integration: $(( $(date +%s) - start ))s for $shards shards and the chaos seeds; logs in $logdir"
exit $status
