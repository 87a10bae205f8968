#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 20000x: a
# count of executions) each, one at a time (go test -fuzz takes one target
# per run). New failures are written under the package's testdata/fuzz and
# fail the run. The budget is a count, not a duration: a duration races
# Go 1.26's fuzz coordinator, which can fail a clean run with "context
# deadline exceeded" at the deadline under CPU load (go.dev/issue/75804,
# fixed in Go 1.27).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-20000x}"
status=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz: $dir $target ($fuzztime)"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir" >/tmp/fuzz-$$.log 2>&1; then
      cat /tmp/fuzz-$$.log
      status=1
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
rm -f /tmp/fuzz-$$.log
if [ "$status" -eq 0 ]; then echo "fuzz: all targets passed"; fi
exit "$status"
