#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 20000x: a
# count of executions) each. New failures are written under the package's
# testdata/fuzz and fail the run. The budget is a count, not a duration: a
# duration races Go 1.26's fuzz coordinator, which can fail a clean run
# with "context deadline exceeded" at the deadline under CPU load
# (go.dev/issue/75804, fixed in Go 1.27).
#
# Each package's instrumented test binary is built once (go test -c
# -fuzz) and run once per target, from the package's directory so that
# its testdata/fuzz seeds are read and new failures written there: a
# `go test -fuzz` per target linked the binary and vetted the package
# again each time, about 7 of a target's 11 seconds. The builds go
# through scripts/fuzz-toolexec.sh, which leaves coverage instrumentation
# to the module's own packages: the fuzzer steers by our parsers'
# branches, and each execution no longer copies and scans the counters of
# every dependency (the phase took 555 CPU-seconds with them, 218 without,
# for the same 20,000 executions a target).
#
# Builds and targets run FUZZJOBS at a time (default 2, one per core of
# the CI machine), each target with one fuzz worker: most of a short run
# is gathering baseline coverage, which uses one core, so two runs side by
# side fill the machine where one run with two workers left it half idle.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-20000x}"
jobs="${FUZZJOBS:-2}"
toolexec="$(pwd)/scripts/fuzz-toolexec.sh" # coverage of our own packages only: see there
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
list=()
dirs=()
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    list+=("$dir $target")
  done
  dirs+=("$dir")
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)

# bin names the test binary of a package directory.
bin() { echo "$work/bin/$(echo "$1" | tr '/.' '__').test"; }
build_one() {
  local dir=$1 log="$work/build-$(echo "$1" | tr '/.' '__').log"
  if ! go test -c -fuzz=. -toolexec "$toolexec" -o "$(bin "$dir")" "./$dir" >"$log" 2>&1; then
    echo "fuzz: build of $dir FAILED"
    cat "$log"
    return 1
  fi
}
run_one() {
  local dir=$1 target=$2 log="$work/$(echo "$1.$2" | tr '/' '_').log" start=$SECONDS
  if (cd "$dir" && "$(bin "$dir")" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
    -test.parallel 1 -test.fuzzcachedir "$work/cache/$dir/$target") >"$log" 2>&1; then
    echo "fuzz: $dir $target ($fuzztime): ok in $((SECONDS - start))s"
  else
    echo "fuzz: $dir $target ($fuzztime): FAILED after $((SECONDS - start))s"
    cat "$log"
    return 1
  fi
}
export -f bin build_one run_one
export fuzztime work toolexec
mkdir -p "$work/bin"
status=0
printf '%s\n' "${dirs[@]}" | sort -u | xargs -P "$jobs" -I{} bash -c 'build_one "$@"' _ {} || status=1
if [ "$status" -eq 0 ]; then
  printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
fi
if [ "$status" -eq 0 ]; then echo "fuzz: all ${#list[@]} targets passed"; fi
exit "$status"
