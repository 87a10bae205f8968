#!/usr/bin/env bash
# The test command (`make test`; CI runs it through .ci/run).
#
# Four phases, each run and reported even when an earlier one failed; the
# exit status fails when any did, and a summary ends the run:
#
#   race  every test with the race detector, first, so that package results
#         show within the first minutes
#   sdk   the tests that drive our wire with the official Anthropic and
#         OpenAI Go SDKs (build tag sdk), once and without the race
#         detector: the SDKs are test-only and large, and race-instrumenting
#         and vetting them tripled the test command's time on an empty
#         build cache; built like the shipped binary (shipped, below)
#   lint  gofmt, go vet, staticcheck; built like the shipped binary
#   fuzz  every fuzz target for a short bounded count (scripts/fuzz-smoke.sh),
#         beside the other phases at the lowest CPU priority: it takes
#         the cores the tests leave idle (the real-Docker end-to-end tests
#         mostly wait on containers) and never slows a test that has work to
#         do. Its lines are printed when it ends, so they do not interleave
#         with the tests'.
#
# The race and sdk phases print one line per package as it finishes, and a
# failed test's output at once (gotestsum, a tool of go.mod), so a long run
# shows progress instead of minutes of silence.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
GOFMT="${GOFMT:-gofmt}"
FUZZTIME="${FUZZTIME:-20000x}"
FUZZ_SMOKE="${FUZZ_SMOKE:-scripts/fuzz-smoke.sh}" # scripts/testsh_test.go points it at a stand-in

work=$(mktemp -d)
fuzz_pid=""
cleanup() {
  if [ -n "$fuzz_pid" ]; then kill -- "-$fuzz_pid" 2>/dev/null || kill "$fuzz_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary=()
failed=0

# record NAME STATUS SECONDS adds a phase's line to the summary.
record() {
  local verdict=ok
  if [ "$2" -ne 0 ]; then verdict=FAILED; failed=1; fi
  summary+=("$(printf '%-5s %-7s %5ss' "$1" "$verdict" "$3")")
}

# phase NAME CMD... runs one phase in the foreground.
phase() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  local status=$?
  record "$name" "$status" $((SECONDS - start))
  return 0
}

lint() {
  local status=0 out
  out=$("$GOFMT" -l . | grep -v '^vendor/' || true)
  if [ -n "$out" ]; then
    echo "gofmt -l:"
    echo "$out"
    status=1
  fi
  "$GO" vet ./... || status=1
  "$GO" tool staticcheck ./... || status=1
  return $status
}

tests() {
  "$GO" tool gotestsum --format pkgname-and-test-fails --format-icons text --format-hide-empty-pkg -- "$@"
}

# shipped runs a command with the build flags of `make build`: CGO off and
# -trimpath. Every build but the race phase's uses them (the sdk and lint
# phases here, the fuzz builds, the binaries tests build through
# internal/hostbin and the Kubernetes tools), because the go command's
# cache keys a compile by its flags: with two sets, a new machine compiled
# the host binary's dependencies twice (internal/hostbin's package doc).
shipped() (
  export CGO_ENABLED=0 GOFLAGS="-trimpath${GOFLAGS:+ $GOFLAGS}"
  "$@"
)

# The fuzz phase starts now, in its own process group (so an interrupt
# stops all of it), and is waited for after the tests.
fuzz_start=$SECONDS
set -m
(FUZZTIME="$FUZZTIME" nice -n 19 "$FUZZ_SMOKE" >"$work/fuzz.log" 2>&1) &
fuzz_pid=$!
set +m

# How many test binaries run at once (go test -p; Go's default is one per
# core): one more than the cores, at most 4. Most packages' tests wait on
# Docker, a container or a timer, not the CPU, and with one per core the
# race phase was bound by cmd/rtsandbox's eight minutes of mostly waiting
# in one slot while the other ran every other package one after another.
# At most 4, because each slot may be starting a container, and Docker
# 20.10 deadlocked here under bursts of concurrent starts.
procs="${TESTPROCS:-$(($(nproc) + 1))}"
[ "$procs" -le 4 ] || procs=4
# -trimpath here too (the other builds have it through shipped): a compile
# whose flags hold no source path is cached for every checkout of the tree,
# so a CI run from a new directory does not compile the module again.
# -vet=off: the lint phase's go vet ./... runs every analyzer go test's
# vet would (a subset of them) on the same files, test files included; a
# second vet here, under other build flags, cost a new machine 35
# CPU-seconds. The files it alone saw are the three race-tagged ones,
# each a constant.
phase race tests -race -trimpath -vet=off -count=1 -timeout 30m -p "$procs" ./...
# The sdk phase runs only the tests the sdk tag adds: the rest of those
# packages ran in the race phase, and running the broker's whole suite a
# second time cost half a minute of every run.
sdk_tests=$(grep -l '^//go:build sdk' modelapi/*_test.go broker/*_test.go internal/fakemodel/*_test.go |
  xargs grep -ho '^func Test[A-Za-z0-9_]*' | sed 's/^func //' | paste -sd '|' -)
# The SDKs compile without optimisation (-N -l): they only drive a few
# requests through our wire here, and optimising their generated code cost
# a new machine 49 of their 156 CPU-seconds.
sdk_gcflags=()
for m in github.com/openai/openai-go/v3 github.com/anthropics/anthropic-sdk-go/v2; do
  sdk_gcflags+=("-gcflags=$m/...=-N -l")
done
phase sdk shipped tests -count=1 -tags sdk "${sdk_gcflags[@]}" -timeout 10m -run "^(${sdk_tests:-NoSDKTests})\$" ./modelapi ./broker ./internal/fakemodel
phase lint shipped lint

echo "== fuzz (ran beside the tests)"
wait "$fuzz_pid"
fuzz_status=$?
fuzz_pid=""
cat "$work/fuzz.log"
record fuzz "$fuzz_status" $((SECONDS - fuzz_start))

echo "== summary"
printf '%s\n' "${summary[@]}"
exit $failed
