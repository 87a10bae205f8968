package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestoreSessionConversation: `rtsandbox backup` taken while
// serve runs a session channel, restored by `rtsandbox restore` into a
// fresh state dir, lets a new serve (a new installation, a new worker
// container) continue the conversation: its first model request holds the
// turn from before the backup. restore refuses while the first serve
// holds its state dir.
func TestBackupRestoreSessionConversation(t *testing.T) {
	parallelServe(t)
	e := echoSession(t, "  turn_timeout: 120s\n")
	e.s.sayOne(t, "http:lobby", "the door is blue", "Answer to the door is blue")

	dir := filepath.Join(t.TempDir(), "backup")
	if out, code := runCmd(t, "backup", "--config", e.cfg, dir); code != exitOK || !strings.Contains(out, "backed up") {
		t.Fatalf("backup beside serve = %d\n%s", code, out)
	}
	if out, code := runCmd(t, "restore", "--config", e.cfg, "--force", dir); code != exitFail || !strings.Contains(out, "stop it first") {
		t.Errorf("restore while serve runs = %d\n%s\nwant exit 1 asking to stop serve", code, out)
	}
	e.s.stopOK(t)
	removeContainersOf(t, e.cli, e.tag) // the restored state must start a worker of its own

	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, e.model.ChatURL(), e.tag, addr, "  turn_timeout: 120s\n")
	if out, code := runCmd(t, "restore", "--config", cfg, dir); code != exitOK {
		t.Fatalf("restore into a fresh state dir = %d\n%s", code, out)
	}
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "what colour is the door?", "Answer to what colour is the door?")
	wantInLast(t, e.model, "the first model request on the restored state", "the door is blue", "Answer to the door is blue")
	s.stopOK(t)
}

// runCmd runs one rtsandbox command and returns its output (stdout and
// stderr) and exit code.
func runCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), args, serveEnv, strings.NewReader(""), &out, &out)
	return out.String(), code
}
