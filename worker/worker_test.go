package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
)

func TestRunPrintsReplyWithoutNewline(t *testing.T) {
	b := startBroker(t, completion("<b>Hi</b> & \u2028bye"))
	r := runWorker(t, b, t.TempDir(), testTurn("alice", "Hi"))
	if want := "{\"ok\":true,\"text\":\"<b>Hi</b> & \u2028bye\"}"; r.code != 0 || r.stdout != want {
		t.Errorf("Run() = %d, %q; want 0, %q (JS-style JSON, no newline)", r.code, r.stdout, want)
	}
}

func TestRunFailures(t *testing.T) {
	valid, _ := json.Marshal(testTurn("alice", "Hi"))
	tests := []struct{ name, stdin string }{
		{"empty-stdin", ""},
		{"not-json", "hello"},
		{"invalid-turn", `{"text":"Hi"}`},
		{"reset-null", strings.Replace(string(valid), `"reset":false`, `"reset":null`, 1)},
		{"stdin-over-limit", string(valid) + strings.Repeat(" ", maxTurnBytes)},
		{"broker-unreachable", string(valid)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runWorkerRaw(t, "/nonexistent/broker.sock", t.TempDir(), tt.stdin)
			wantFailed(t, r)
			if r.stderr == "" {
				t.Errorf("stderr is empty; want the failure detail")
			}
		})
	}
	if want := `{"ok":false,"text":"` + rtsandbox.WorkerFailedText + `"}`; failedReply != want {
		t.Errorf("failedReply = %s; want %s", failedReply, want)
	}
}
