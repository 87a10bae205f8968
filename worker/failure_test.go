package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// marker stands for guest text and model content: it must never reach the
// failure line.
const marker = "GUEST-MARKER-7f3a"

// failureLine checks that stderr is exactly one JSON line with exactly the
// keys error_class and detail, and returns them.
func failureLine(t *testing.T, stderr string) (class, detail string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("stderr = %q; want exactly one line", stderr)
	}
	var fields map[string]string
	if err := json.Unmarshal([]byte(stderr), &fields); err != nil || len(fields) != 2 {
		t.Fatalf("stderr = %q (%v); want {\"error_class\",\"detail\"}", stderr, err)
	}
	if strings.Contains(stderr, marker) {
		t.Errorf("stderr %q holds guest or model text", stderr)
	}
	return fields["error_class"], fields["detail"]
}

// TestFailureLines: every failure class, reached through Run, writes its one
// line, keeps stdout the fixed failure reply and exits 1.
func TestFailureLines(t *testing.T) {
	valid, _ := jsonjs.Marshal(testTurn("alice", marker))
	badZone := testTurn("alice", marker)
	badZone.TimeZone = "Mars/Olympus"
	badZoneJSON, _ := jsonjs.Marshal(badZone)
	bigTools := testTurn("alice", marker)
	bigTools.Tools = []rtsandbox.ToolSpec{{Name: "big", Description: strings.Repeat("d", maxToolList), Parameters: json.RawMessage(`{}`)}}
	bigToolsJSON, _ := jsonjs.Marshal(bigTools)
	var tooMany []map[string]any
	for i := range rtsandbox.MaxToolCallsPerMessage + 1 {
		tooMany = append(tooMany, call(fmt.Sprint("c", i), "memory_get", `{"scope":"channel"}`))
	}
	status := func(code int) func(*fakeBroker) {
		return func(b *fakeBroker) {
			b.handle(wire.RouteModel, func(string) (int, string) { return code, `{"error":"` + marker + `"}` })
		}
	}
	answer := func(a string) func(*fakeBroker) {
		return func(b *fakeBroker) {
			b.handle(wire.RouteModel, func(string) (int, string) { return http.StatusOK, a })
		}
	}
	tests := []struct {
		name          string
		stdin         string
		broker        func(*fakeBroker) // nil: no broker at the socket
		class, detail string
	}{
		{"not-json", "hello " + marker, nil, classInvalidTurn, "invalid turn"},
		{"missing-field", `{"text":"` + marker + `"}`, nil, classInvalidTurn, "invalid turn: model"},
		{"stdin-over-limit", string(valid) + strings.Repeat(" ", maxTurnBytes), nil, classInvalidTurn, "stdin unreadable or over its limit"},
		{"bad-time-zone", string(badZoneJSON), answer(completion("x")), classInvalidTurn, "invalid time zone"},
		{"broker-unreachable", string(valid), nil, classBrokerUnreachable, "broker call failed"},
		{"broker-refused", string(valid), status(http.StatusForbidden), classBrokerRefused, "status 403"},
		{"turn-ended", string(valid), status(http.StatusGone), classBrokerRefused, "status 410"},
		{"budget-exhausted", string(valid), status(http.StatusTooManyRequests), classBudgetExhausted, "status 429"},
		{"upstream-failed", string(valid), status(http.StatusBadGateway), classUpstreamFailed, "status 502"},
		{"model-not-json", string(valid), answer(marker), classModelResponse, "broker returned no JSON"},
		{"model-no-message", string(valid), answer(`{"choices":[{"message":"` + marker + `"}]}`), classModelResponse, "invalid model response"},
		{"too-many-tool-calls", string(valid), answer(completion(marker, tooMany...)), classModelResponse, "too many tool calls"},
		{"null-content", string(valid), answer(completion(nil)), classNoFinalText, "model content is not a string"},
		{"blank-content", string(valid), answer(completion(" \n\t")), classNoFinalText, "model content is blank"},
		{"tool-list-budget", string(bigToolsJSON), answer(completion("x")), classToolListBudget, "tool descriptions exceed context budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sock := "/nonexistent/broker.sock"
			if tc.broker != nil {
				b := startBroker(t)
				tc.broker(b)
				sock = b.sock
			}
			r := runWorkerRaw(t, sock, tc.stdin)
			wantFailed(t, r)
			class, detail := failureLine(t, r.stderr)
			if class != tc.class || detail != tc.detail {
				t.Errorf("failure line = %q, %q; want %q, %q", class, detail, tc.class, tc.detail)
			}
		})
	}
}

// panicReader panics on Read, like a bug anywhere in the turn.
type panicReader struct{}

func (panicReader) Read([]byte) (int, error) { panic("boom " + marker) }

// brokenWriter fails every write, like a closed stdout.
type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestFailureLinePanic(t *testing.T) {
	var out, errOut strings.Builder
	code := Run(context.Background(), Options{Stdin: panicReader{}, Stdout: &out, Stderr: &errOut})
	if code != 1 || out.String() != failedReply {
		t.Fatalf("Run() = %d, %q; want 1, %q", code, out.String(), failedReply)
	}
	if class, detail := failureLine(t, errOut.String()); class != classPanic || detail != "recovered panic" {
		t.Errorf("failure line = %q, %q; want panic", class, detail)
	}
}

func TestFailureLineWriteFailed(t *testing.T) {
	b := startBroker(t, completion("Hi."))
	in, _ := jsonjs.Marshal(testTurn("alice", "Hi"))
	var errOut strings.Builder
	code := Run(context.Background(), Options{
		Stdin: strings.NewReader(string(in)), Stdout: brokenWriter{}, Stderr: &errOut,
		Socket: b.sock, Now: func() time.Time { return testNow },
	})
	if code != 1 {
		t.Fatalf("Run() = %d; want 1", code)
	}
	if class, detail := failureLine(t, errOut.String()); class != classWriteFailed || detail != "stdout write failed" {
		t.Errorf("failure line = %q, %q; want write_failed", class, detail)
	}
}

// Classes Run cannot reach with a valid setup still map: an oversized
// context (the budgets keep it unreachable today), an unencodable reply
// and anything unknown.
func TestClassify(t *testing.T) {
	a := &agent{model: openaiClient{}, payload: modelPayload{Messages: []message{{Role: "system", Content: strings.Repeat("s", maxPayload)}, {Role: "user", Content: "u"}}}}
	tests := []struct {
		name          string
		err           error
		class, detail string
	}{
		{"context-budget", a.fitContext(), classContextBudget, "model context exceeds request budget"},
		{"encode", errors.Join(errEncode, errors.New("json: unsupported value "+marker)), classInternal, "reply not encodable"},
		{"unknown", errors.New("something " + marker), classInternal, "unclassified error"},
		{"wrapped-status", fmt.Errorf("x: %w", errBrokerUnreachable), classBrokerUnreachable, "broker call failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if class, detail := classify(tc.err); class != tc.class || detail != tc.detail {
				t.Errorf("classify(%v) = %q, %q; want %q, %q", tc.err, class, detail, tc.class, tc.detail)
			}
		})
	}
}

// The host knows exactly the worker's classes (container.WorkerClasses):
// a class it did not know would be dropped from the operator log.
func TestClassesKnownToHost(t *testing.T) {
	worker := []string{
		classInvalidTurn, classBrokerUnreachable, classBrokerRefused, classBudgetExhausted,
		classUpstreamFailed, classModelResponse, classNoFinalText, classContextBudget,
		classToolListBudget, classWriteFailed, classPanic, classInternal,
		classModelOverloaded, classModelStream,
	}
	if diff := cmp.Diff(container.WorkerClasses(), worker); diff != "" {
		t.Errorf("worker classes differ from the host's (-host +worker):\n%s", diff)
	}
}
