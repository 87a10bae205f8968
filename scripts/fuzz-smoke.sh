#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 20000x: a
# count of executions) each (go test -fuzz takes one target per run). New
# failures are written under the package's testdata/fuzz and fail the run.
# The budget is a count, not a duration: a duration races Go 1.26's fuzz
# coordinator, which can fail a clean run with "context deadline exceeded"
# at the deadline under CPU load (go.dev/issue/75804, fixed in Go 1.27).
#
# Targets run FUZZJOBS at a time (default 2, one per core of the CI
# machine), each with one fuzz worker: most of a short run is compiling
# and linking the instrumented test binary and gathering baseline
# coverage, which use one core, so two runs side by side fill the machine
# where one run with two workers left it half idle.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-20000x}"
jobs="${FUZZJOBS:-2}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
list=()
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    list+=("$dir $target")
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
run_one() {
  local dir=$1 target=$2 log="$logs/$(echo "$1.$2" | tr '/' '_').log"
  if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 1 "./$dir" >"$log" 2>&1; then
    echo "fuzz: $dir $target ($fuzztime): ok"
  else
    echo "fuzz: $dir $target ($fuzztime): FAILED"
    cat "$log"
    return 1
  fi
}
export -f run_one
export fuzztime logs
status=0
printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
if [ "$status" -eq 0 ]; then echo "fuzz: all ${#list[@]} targets passed"; fi
exit "$status"
