package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// faultHeard bounds how long the guest may wait for a turn whose
// container failed: generous for a loaded CI machine, far below the 120 s
// turn timeout, so a pass proves the fault was watched, not timed out.
const faultHeard = 10 * time.Second

// TestSessionServeWorkerFaults (issue 22 item 1): through serve and the
// chat API, with a 120 s turn timeout, a session worker whose container
// is killed, removed, paused or crashed (PID 1 killed from the host, as
// an OOM kill would; Docker's restart policy restarts it) while its
// model call hangs: the guest hears the sandbox-stopped text within
// seconds, the message queued behind it is answered next, in the same
// conversation, on a new container, or on the restarted one, which is
// kept. One serve and one channel for every fault.
func TestSessionServeWorkerFaults(t *testing.T) {
	tag, cli := sessionDocker(t)
	release := make(chan struct{})
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			words := lastWords(req.UserText())
			if strings.HasPrefix(words, "hold") {
				<-release
			}
			return fakemodel.Response{Content: "Answer to " + words}
		}))
	defer model.Close()
	defer close(release) // before Close, which waits for the handlers
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "before the faults", "Answer to before the faults")

	ctx := context.Background()
	tests := []struct {
		name  string
		fault func(t *testing.T, id string)
		kept  bool // the next turn runs in the same container
	}{
		{"killed", func(t *testing.T, id string) {
			if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"removed", func(t *testing.T, id string) {
			if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"paused", func(t *testing.T, id string) {
			if _, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"crashed", func(t *testing.T, id string) {
			res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(res.Container.State.Pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill the worker's PID 1 (needs root): %v", err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			before := oneContainer(t, cli, tag, s)
			n := len(model.Requests())
			held := s.sayLater("http:lobby", "hold "+tt.name)
			waitFor(t, func() bool { return len(model.Requests()) > n })
			queued := s.sayLater("http:lobby", "after "+tt.name)
			faulted := time.Now()
			tt.fault(t, before.ID)
			select {
			case got := <-held:
				heard := time.Since(faulted)
				if len(got) != 1 || got[0] != rtsandbox.SandboxStoppedText {
					t.Errorf("reply to the cut turn = %q; want %q", got, rtsandbox.SandboxStoppedText)
				}
				t.Logf("%s: the guest heard after %v", tt.name, heard)
			case <-time.After(faultHeard):
				t.Fatalf("%s: no reply within %v\nserve:\n%s", tt.name, faultHeard, s.out.String())
			}
			select {
			case got := <-queued:
				if want := "Answer to after " + tt.name; len(got) != 1 || got[0] != want {
					t.Errorf("reply to the queued message = %q; want %q", got, want)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: the queued message got no reply\nserve:\n%s", tt.name, s.out.String())
			}
			wantInLast(t, model, "the request after the fault", "Answer to before the faults")
			after := oneContainer(t, cli, tag, s)
			if kept := after.ID == before.ID; kept != tt.kept {
				t.Errorf("the next turn ran in the same container: %v; want %v", kept, tt.kept)
			}
			t.Logf("%s: case took %v", tt.name, time.Since(began))
		})
	}
	out := s.out.String()
	if n := strings.Count(out, `"msg":"session container stopped serving"`); n != 4 {
		t.Errorf("%d operator lines of a stopped container; want 4:\n%s", n, out)
	}
	if strings.Contains(out, `"timed_out":true`) {
		t.Errorf("a fault was found at the turn deadline:\n%s", out)
	}
	s.stopOK(t)
}
