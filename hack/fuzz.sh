#!/usr/bin/env bash
# Fuzzes every Go fuzz target of the module for FUZZTIME each (default 1m),
# one after the other, and prints per target the time, the inputs tried and
# the corpus it grew, and the result (FUZZPARALLEL sets -parallel). New
# failing inputs land in the package's testdata/fuzz/, which `make test`
# then replays with the seed corpora.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-1m}
parallel=${FUZZPARALLEL:-$(nproc)}
status=0
while IFS=: read -r file _ decl; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$decl")
  pkg=./$(dirname "$file")
  start=$(date +%s)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg" >/tmp/nodeshepherd-fuzz.log 2>&1; then
    result=ok
  else
    result=FAIL; status=1
    tail -n 30 /tmp/nodeshepherd-fuzz.log
  fi
  # The last progress line: "elapsed: 1m0s, execs: N (r/sec), new interesting: M (total: T)".
  progress=$(grep -o 'execs: [0-9]* ([0-9]*/sec), new interesting: [0-9]* (total: [0-9]*)' /tmp/nodeshepherd-fuzz.log | tail -n 1 || true)
  echo "fuzz: $pkg $name: $result after $(( $(date +%s) - start ))s; ${progress:-no progress line}"
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' pkg cmd 2>/dev/null | sort)
exit $status
