// Package scripts holds the project's shell entry points; its test holds
// scripts/test.sh (the README's test command) to its contract.
package scripts_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeGo records each call and fails the calls whose arguments contain
// one of the words in FAKE_GO_FAIL (space-separated).
const fakeGo = `#!/usr/bin/env bash
echo "$*" >>"$FAKE_GO_LOG"
for w in $FAKE_GO_FAIL; do
  case " $* " in *" $w "*) echo "fake go: $* failed"; exit 1 ;; esac
done
`

const fakeFuzz = `#!/usr/bin/env bash
echo "fuzz: stand-in ran"
exit "${FAKE_FUZZ_STATUS:-0}"
`

// TestTestScriptRunsEveryPhase: every phase of the test command runs and
// reports even when an earlier one failed, and the exit status fails when
// any phase did (issue 26 item 6: after a failure, the SDK tests used to
// be skipped).
func TestTestScriptRunsEveryPhase(t *testing.T) {
	tests := []struct {
		name       string
		fail       string // words whose go calls fail
		fuzzStatus string
		wantExit   int
		want       map[string]string // phase → ok or FAILED
	}{
		{"all-pass", "", "0", 0, map[string]string{"race": "ok", "sdk": "ok", "lint": "ok", "fuzz": "ok"}},
		{"race-fails", "-race", "0", 1, map[string]string{"race": "FAILED", "sdk": "ok", "lint": "ok", "fuzz": "ok"}},
		{"vet-and-fuzz-fail", "vet", "1", 1, map[string]string{"race": "ok", "sdk": "ok", "lint": "FAILED", "fuzz": "FAILED"}},
		{"everything-fails", "-race sdk vet", "1", 1, map[string]string{"race": "FAILED", "sdk": "FAILED", "lint": "FAILED", "fuzz": "FAILED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			goBin, fuzz, log := filepath.Join(dir, "go"), filepath.Join(dir, "fuzz.sh"), filepath.Join(dir, "go.log")
			for path, body := range map[string]string{goBin: fakeGo, fuzz: fakeFuzz} {
				if err := os.WriteFile(path, []byte(body), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "test.sh")
			cmd.Env = append(os.Environ(), "GO="+goBin, "GOFMT=true", "FUZZ_SMOKE="+fuzz, "FAKE_GO_LOG="+log,
				"FAKE_GO_FAIL="+tt.fail, "FAKE_FUZZ_STATUS="+tt.fuzzStatus)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			exit := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if exit != tt.wantExit {
				t.Errorf("exit = %d; want %d\n%s", exit, tt.wantExit, out.String())
			}
			if diff := cmp.Diff(tt.want, summary(out.String())); diff != "" {
				t.Errorf("summary (-want +got):\n%s\n%s", diff, out.String())
			}
			calls, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"tool gotestsum", "-race", "-tags sdk", "vet ./...", "tool staticcheck ./..."} {
				if !strings.Contains(string(calls), want) {
					t.Errorf("no go call with %q ran:\n%s", want, calls)
				}
			}
			// go vet runs once, in the lint phase, not again inside the
			// race phase's go test.
			if race := raceRun.FindString(string(calls)); !strings.Contains(race, " -vet=off ") {
				t.Errorf("the race phase's go test vets again (no -vet=off): %q", race)
			}
			// The sdk phase runs the tests the tag adds, not the packages'
			// whole suites again.
			names := ""
			if sdk := sdkRun.FindStringSubmatch(string(calls)); sdk != nil {
				names = "|" + sdk[1] + "|"
			}
			if !strings.Contains(names, "|TestAnthropicSDKThroughBroker|") || strings.Contains(names, "|TestSessionResultOneReaderAndAbort|") {
				t.Errorf("the sdk phase's -run does not name exactly the sdk-tagged tests:\n%s", calls)
			}
			if !strings.Contains(out.String(), "fuzz: stand-in ran") {
				t.Errorf("the fuzz phase's output is missing:\n%s", out.String())
			}
		})
	}
}

var sdkRun = regexp.MustCompile(`-tags sdk .*-run \^\(([^)]*)\)\$`)

// raceRun is the race phase's go call.
var raceRun = regexp.MustCompile(`(?m)^tool gotestsum .* -race .*$`)

var summaryLine = regexp.MustCompile(`(?m)^(race|sdk|lint|fuzz)\s+(ok|FAILED)\s+\d+s$`)

// summary reads the phases' verdicts from the lines after "== summary".
func summary(out string) map[string]string {
	_, tail, ok := strings.Cut(out, "== summary\n")
	if !ok {
		return nil
	}
	got := map[string]string{}
	for _, m := range summaryLine.FindAllStringSubmatch(tail, -1) {
		got[m[1]] = m[2]
	}
	return got
}
