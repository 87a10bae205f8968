package worker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reply, then its end mark (one newline: the host takes the reply
// there without waiting for the exit); a failure writes none
// (TestRunFailures' wantFailed compares stdout whole).
func TestRunPrintsReplyThenEndMark(t *testing.T) {
	b := startBroker(t, completion("<b>Hi</b> & \u2028bye"))
	r := runWorker(t, b, newChannel(nil, nil), testTurn("alice", "Hi"))
	want := "{\"ok\":true,\"text\":\"<b>Hi</b> & \u2028bye\",\"state\":{\"memory\":[],\"history\":[" +
		`{"role":"user","content":"{\"speaker\":{\"id\":\"alice\",\"name\":\"ALICE\"},\"message\":\"Hi\"}"},` +
		"{\"role\":\"assistant\",\"content\":\"<b>Hi</b> & \u2028bye\"}]}}\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("Run() = %d, %q; want 0, %q (JS-style JSON, then the end mark)", r.code, r.stdout, want)
	}
}

func TestRunFailures(t *testing.T) {
	valid, _ := json.Marshal(testTurn("alice", "Hi"))
	tests := []struct{ name, stdin string }{
		{"empty-stdin", ""},
		{"not-json", "hello"},
		{"invalid-turn", `{"text":"Hi"}`},
		{"reset-null", strings.Replace(string(valid), `"reset":false`, `"reset":null`, 1)},
		{"memory-missing", strings.Replace(string(valid), `"memory":[],`, ``, 1)},
		{"history-null", strings.Replace(string(valid), `"history":[]`, `"history":null`, 1)},
		{"stdin-over-limit", string(valid) + strings.Repeat(" ", maxTurnBytes)},
		{"broker-unreachable", string(valid)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runWorkerRaw(t, "/nonexistent/broker.sock", tt.stdin)
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

// A turn of exactly maxTurnBytes runs (a full channel state fits); one
// byte more fails before any broker call.
func TestRunStdinLimit(t *testing.T) {
	turn := testTurn("alice", "Hi")
	turn.Memory = nearCapacityNotes()
	turn.History = hugeHistory()
	in, err := jsonjs.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) > maxTurnBytes {
		t.Fatalf("turn is %d bytes; want ≤ %d", len(in), maxTurnBytes)
	}
	full := string(in) + strings.Repeat(" ", maxTurnBytes-len(in))
	b := startBroker(t, completion("Fits."))
	wantOK(t, runWorkerRaw(t, b.sock, full), "Fits.")

	over := startBroker(t)
	wantFailed(t, runWorkerRaw(t, over.sock, full+" "))
	if routes := over.gotRoutes(); len(routes) != 0 {
		t.Errorf("routes = %v; want none", routes)
	}
}

// The worker needs no workspace and no file at all: with no Workspace
// option, the container's /workspace absent and the working directory
// deleted, a turn that changes memory still runs and returns its state, and
// nothing is created.
func TestRunNeedsNoWorkspace(t *testing.T) {
	_, err := os.Lstat(wire.WorkspacePath)
	workspaceAbsent := errors.Is(err, fs.ErrNotExist)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	ch := newChannel(nil, nil)
	b := startBroker(t,
		completion(nil, call("s", "memory_set", `{"scope":"channel","key":"k","text":"kept by the host"}`)),
		completion("Saved."),
	)
	wantOK(t, runWorker(t, b, ch, testTurn("alice", "Remember")), "Saved.")
	if want := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: "kept by the host"}}; len(ch.state.Memory) != 1 || ch.state.Memory[0] != want[0] {
		t.Errorf("returned memory = %v; want %v", ch.state.Memory, want)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted working directory exists again: %v", err)
	}
	if _, err := os.Lstat(wire.WorkspacePath); workspaceAbsent && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the worker created %s: %v", wire.WorkspacePath, err)
	}
}
