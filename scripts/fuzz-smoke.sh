#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 20000x: a
# count of executions) each. New failures are written under the package's
# testdata/fuzz and fail the run. The budget is a count, not a duration: a
# duration races Go 1.26's fuzz coordinator, which can fail a clean run
# with "context deadline exceeded" at the deadline under CPU load
# (go.dev/issue/75804, fixed in Go 1.27).
#
# Each package's instrumented test binary is built once (go test -c) and
# run once per target, from the package's directory so that its
# testdata/fuzz seeds are read and new failures written there: a
# `go test -fuzz` per target linked the binary and vetted the package
# again each time, about 7 of a target's 11 seconds.
#
# Coverage instrumentation (the compiler's -d=libfuzzer, what go test
# -fuzz adds) goes to the module's own packages only, through a -gcflags
# pattern, not to their dependencies:
#   - after every execution the fuzzing worker copies and scans every
#     counter of the binary. In the worker package's binary the
#     dependencies' (net/http, the MCP SDK, JSON Schema and the rest) were
#     161 KB, ours 16 KB; with them the phase took 555 CPU-seconds, without
#     218, for the same 20,000 executions a target. The fuzzer steers by
#     our parsers' branches, the code under test;
#   - the dependencies compile with the flags of every other plain build,
#     so the go command's cache shares them with go vet, staticcheck, the
#     SDK phase and the Kubernetes tools instead of compiling them a second
#     time (go test -fuzz keys its instrumented builds apart).
# A run that reports no coverage instrumentation fails: it would fuzz blind.
#
# Builds and targets run FUZZJOBS at a time (default 2, one per core of
# the CI machine), each target with one fuzz worker: most of a short run
# is gathering baseline coverage, which uses one core, so two runs side by
# side fill the machine where one run with two workers left it half idle.
#
# FUZZROOT names another module to fuzz (scripts/fuzzsmoke_test.go) and
# FUZZBIN keeps the test binaries in a directory of the caller's.
set -euo pipefail
cd "${FUZZROOT:-$(dirname "$0")/..}"
fuzztime="${FUZZTIME:-20000x}"
jobs="${FUZZJOBS:-2}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bindir="${FUZZBIN:-$work/bin}"
gcflags="" # where go test -fuzz instruments, so do we
case "$(go env GOARCH)" in
amd64 | arm64 | loong64) gcflags="-gcflags=$(go list -m)/...=-d=libfuzzer" ;;
esac
list=()
dirs=()
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    list+=("$dir $target")
  done
  dirs+=("$dir")
done < <(grep -rl --include='*_test.go' --exclude-dir=testdata '^func Fuzz' . | sort) # go's ./... skips testdata too

# bin names the test binary of a package directory.
bin() { echo "$bindir/$(echo "$1" | tr '/.' '__').test"; }
build_one() {
  local dir=$1 log="$work/build-$(echo "$1" | tr '/.' '__').log"
  if ! go test -c ${gcflags:+"$gcflags"} -o "$(bin "$dir")" "./$dir" >"$log" 2>&1; then
    echo "fuzz: build of $dir FAILED"
    cat "$log"
    return 1
  fi
}
run_one() {
  local dir=$1 target=$2 log="$work/$(echo "$1.$2" | tr '/' '_').log" start=$SECONDS
  if (cd "$dir" && "$(bin "$dir")" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
    -test.parallel 1 -test.fuzzcachedir "$work/cache/$dir/$target") >"$log" 2>&1 &&
    { [ -z "$gcflags" ] || ! grep -q 'not built with coverage instrumentation' "$log"; }; then
    echo "fuzz: $dir $target ($fuzztime): ok in $((SECONDS - start))s"
  else
    echo "fuzz: $dir $target ($fuzztime): FAILED after $((SECONDS - start))s"
    cat "$log"
    return 1
  fi
}
export -f bin build_one run_one
export fuzztime work bindir gcflags
mkdir -p "$bindir"
status=0
printf '%s\n' "${dirs[@]}" | sort -u | xargs -P "$jobs" -I{} bash -c 'build_one "$@"' _ {} || status=1
if [ "$status" -eq 0 ]; then
  printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
fi
if [ "$status" -eq 0 ]; then echo "fuzz: all ${#list[@]} targets passed"; fi
exit "$status"
