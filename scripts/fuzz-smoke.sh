#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 20000x: a
# count of executions) each. New failures are written under the package's
# testdata/fuzz and fail the run. The budget is a count, not a duration: a
# duration races Go 1.26's fuzz coordinator, which can fail a clean run
# with "context deadline exceeded" at the deadline under CPU load
# (go.dev/issue/75804, fixed in Go 1.27).
#
# Each package's instrumented test binary is built once and run once per
# target, from the package's directory so that its testdata/fuzz seeds are
# read and new failures written there: a `go test -fuzz` per target linked
# the binary and vetted the package again each time, about 7 of a
# target's 11 seconds. One go command builds them all (go test -c -o
# dir/): two go commands side by side each compile every dependency the
# other has not cached yet, which on an empty build cache cost 59 of the
# builds' 198 CPU-seconds. They build with the flags of `make build`
# (CGO off, -trimpath), which the test command's other non-race builds
# share (internal/hostbin's package doc says why).
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
# Targets run FUZZJOBS at a time (default 2, one per core of the CI
# machine), each with one fuzz worker: most of a short run is gathering
# baseline coverage, which uses one core, so two runs side by side fill the
# machine where one run with two workers left it half idle.
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
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd) # the targets run from their packages' directories
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

# bin names the test binary of a package directory: go test -c -o dir/
# names it after the last element of the package's import path, which for
# the module's root package is the module path's (two packages with the
# same last element fail the build, naming both).
module=$(go list -m)
bin() {
  if [ "$1" = . ]; then echo "$bindir/${module##*/}.test"; else echo "$bindir/$(basename "$1").test"; fi
}
build_all() {
  local pkgs=() dir
  for dir in "$@"; do pkgs+=("./$dir"); done
  if ! CGO_ENABLED=0 go test -c -trimpath ${gcflags:+"$gcflags"} -o "$bindir/" "${pkgs[@]}" >"$work/build.log" 2>&1; then
    echo "fuzz: build FAILED"
    cat "$work/build.log"
    return 1
  fi
}
run_one() {
  local dir=$1 target=$2 log="$work/$(echo "$1.$2" | tr '/' '_').log" start=$SECONDS
  local binary
  binary=$(bin "$dir")
  if (cd "$dir" && "$binary" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
    -test.parallel 1 -test.fuzzcachedir "$work/cache/$dir/$target") >"$log" 2>&1 &&
    { [ -z "$gcflags" ] || ! grep -q 'not built with coverage instrumentation' "$log"; }; then
    echo "fuzz: $dir $target ($fuzztime): ok in $((SECONDS - start))s"
  else
    echo "fuzz: $dir $target ($fuzztime): FAILED after $((SECONDS - start))s"
    cat "$log"
    return 1
  fi
}
export -f bin run_one
export fuzztime work bindir gcflags module
status=0
mapfile -t dirs < <(printf '%s\n' "${dirs[@]}" | sort -u)
build_all "${dirs[@]}" || status=1
if [ "$status" -eq 0 ]; then
  printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
fi
if [ "$status" -eq 0 ]; then echo "fuzz: all ${#list[@]} targets passed"; fi
exit "$status"
