#!/usr/bin/env bash
# Runs the unit tests (every package outside test/) under the race detector:
# make test-unit, and make test's unit phase.
#
# go test links every race-enabled test binary again on every run, even when
# nothing changed, and on 2 cores linking ~50 of them was most of a warm run.
# Here `go test -c` writes them to bin/unit-tests/ and relinks only those whose
# package or dependencies changed (it compares the build ID); vet runs as
# under go test (cached). Then every binary runs, every time (as -count=1:
# a result is never replayed from the cache, since several tests read what
# go's test cache does not track, e.g. deploy/ and the chart through kubectl
# and helm), UNIT_JOBS at once (default 4: many tests mostly wait), the
# slowest of the last run first, each in its package's directory as go test
# runs it. Output is go test's: the "ok"/"FAIL" line per package, the test's
# output when it fails or with -v. UNIT_BIN_DIR puts the binaries elsewhere
# (two runs at once must not relink binaries the other one runs).
#
#   hack/test-unit.sh [-v] [-run REGEXP]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() { echo "usage: hack/test-unit.sh [-v] [-run REGEXP] (UNIT_JOBS=N runs N test binaries at once)" >&2; exit 2; }
flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    -v) flags+=(-test.v) ;;
    -run) [ $# -ge 2 ] || usage; flags+=("-test.run=$2"); shift ;;
    -run=*) flags+=("-test.run=${1#-run=}") ;;
    *) echo "test-unit: unknown argument $1" >&2; usage ;;
  esac
  shift
done
jobs=${UNIT_JOBS:-4}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "test-unit: UNIT_JOBS=$jobs: want a positive number" >&2; exit 2; }

bindir=${UNIT_BIN_DIR:-$root/bin/unit-tests}
times="$bindir/times" # "seconds package" of the last run, to start the slowest first
mkdir -p "$bindir"

# Import path, directory and whether it has tests, for the packages outside test/.
mapfile -t lines < <(go list -f '{{.ImportPath}} {{.Dir}} {{if or .TestGoFiles .XTestGoFiles}}tests{{else}}none{{end}}' ./... |
  awk '$1 !~ /\/test\//')
[ ${#lines[@]} -gt 0 ] || { echo "test-unit: go list found no packages" >&2; exit 1; }

# go test -c -o DIR names a binary after the package's last path element and
# refuses two of one name in a call: packages of one name go to different
# subdirectories (bin/unit-tests/0, /1, ...), one call each.
declare -A seen=() binary=() dirOf=()
groups=()
order=()
for l in "${lines[@]}"; do
  read -r pkg dir has <<<"$l"
  name=${pkg##*/}
  g=${seen[$name]:-0}
  seen[$name]=$((g + 1))
  groups[$g]+="$pkg "
  if [ "$has" = tests ]; then
    binary[$pkg]="$bindir/$g/$name.test"
    dirOf[$pkg]=$dir
    order+=("$pkg")
  fi
done

start=$(date +%s)
for g in "${!groups[@]}"; do
  # shellcheck disable=SC2086 # a list of import paths
  # -s -w: go test leaves the symbol table and DWARF out of the binaries it
  # runs; -c alone would keep them, and take longer to link.
  go test -race -c -ldflags='-s -w' -o "$bindir/$g/" ${groups[$g]} | grep -v 'no test files$'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL (build)"; exit 1; }
done
built=$(date +%s)

# Slowest first (by the last run; packages it did not time first of all).
declare -A last=()
if [ -f "$times" ]; then
  while read -r s p; do [ -n "$p" ] && last[$p]=$s; done <"$times"
fi
mapfile -t order < <(for p in "${order[@]}"; do echo "${last[$p]:-9999} $p"; done | sort -s -k1,1 -rn | cut -d' ' -f2)

logdir=$(mktemp -d /tmp/nodeshepherd-unit.XXXXXX)
gobin=$(go env GOROOT)/bin
declare -A pidPkg=() t0=()
running=() # pids of the binaries running now
failed=0
newtimes=()
trap 'kill "${running[@]}" 2>/dev/null; exit 130' INT TERM

# reap waits for one of the running binaries to end and reports its package.
reap() {
  local pid rc p keep=()
  wait -n -p pid "${running[@]}"
  rc=$?
  for p in "${running[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  running=("${keep[@]}")
  finish "${pidPkg[$pid]}" "$rc"
}

# finish reports pkg, whose binary ended with status rc.
finish() {
  local pkg=$1 rc=$2
  local s
  s=$(awk -v a="${t0[$pkg]}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
  newtimes+=("$s $pkg")
  if [ "$rc" -eq 0 ]; then
    [ ${#flags[@]} -gt 0 ] && [[ " ${flags[*]} " == *" -test.v "* ]] && cat "$logdir/${pkg//\//_}.log"
    printf 'ok  \t%s\t%ss\n' "$pkg" "$s"
  else
    cat "$logdir/${pkg//\//_}.log"
    printf 'FAIL\t%s\t%ss\n' "$pkg" "$s"
    failed=1
  fi
}

for pkg in "${order[@]}"; do
  while [ ${#running[@]} -ge "$jobs" ]; do reap; done
  t0[$pkg]=$(date +%s.%N)
  (cd "${dirOf[$pkg]}" && PATH="$gobin:$PATH" PWD="${dirOf[$pkg]}" exec "${binary[$pkg]}" \
    -test.paniconexit0 -test.timeout=10m -test.count=1 "${flags[@]}") >"$logdir/${pkg//\//_}.log" 2>&1 &
  pidPkg[$!]=$pkg
  running+=("$!")
done
while [ ${#running[@]} -gt 0 ]; do reap; done
if [ ${#newtimes[@]} -ne ${#order[@]} ]; then
  echo "test-unit: $((${#order[@]} - ${#newtimes[@]})) of ${#order[@]} packages did not report"
  failed=1
fi

# A run of some tests (-run) says little about a package's whole time.
[[ " ${flags[*]} " == *" -test.run="* ]] || printf '%s\n' "${newtimes[@]}" >"$times"
end=$(date +%s)
echo "test-unit: $((end - start))s ($((built - start))s building, $((end - built))s running ${#order[@]} packages, $jobs at once)"
if [ "$failed" -ne 0 ]; then
  echo "FAIL"
  exit 1
fi
rm -rf "$logdir"
