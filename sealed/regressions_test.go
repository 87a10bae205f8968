package sealed

// The runtime bullets of the reference's review regressions and of its extra
// acceptance tests), plus the filesystem hygiene they rest on.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestPermissionsFailClosed(t *testing.T) {
	tests := []struct {
		name string
		prep func(t *testing.T, root string)
	}{
		{"mode-0755", func(t *testing.T, root string) { mustChmod(t, root, 0o755) }},
		{"mode-0710", func(t *testing.T, root string) { mustChmod(t, root, 0o710) }},
		{"mode-0701", func(t *testing.T, root string) { mustChmod(t, root, 0o701) }},
		{"not-a-directory", func(t *testing.T, root string) {
			if err := os.Remove(root); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(root, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	if os.Getuid() == 0 {
		tests = append(tests, struct {
			name string
			prep func(t *testing.T, root string)
		}{"owned-by-another-uid", func(t *testing.T, root string) {
			if err := os.Chown(root, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}})
	}
	for _, tc := range tests {
		t.Run("run-"+tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			opts := f.opts
			opts.RunRoot = filepath.Join(f.base, "run2")
			if err := os.Mkdir(opts.RunRoot, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.prep(t, opts.RunRoot)
			if rt, err := New(opts); !errors.Is(err, rtsandbox.ErrInvalid) {
				if rt != nil {
					rt.Close(context.Background())
				}
				t.Errorf("New(run root %s) = %v; want a refusal", tc.name, err)
			}
		})
	}
}

func mustChmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestRootsCreatedPrivate: missing roots (and their parents) are created
// 0700 whatever the umask, and a symlinked root is used by its real path.
func TestRootsCreatedPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	base := shortTempDir(t)
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(f *fixture) {
		f.opts.RunRoot = filepath.Join(base, "link")
	})
	for _, dir := range []string{real, f.stateDir} {
		if err := privdir.Check(dir, os.Getuid()); err != nil {
			t.Errorf("root %s: %v", dir, err)
		}
	}
	if f.rt.s.RunRoot != real {
		t.Errorf("run root %s; want the canonical %s", f.rt.s.RunRoot, real)
	}
}

// TestWorkerRepairsProviderToolCalls runs the real worker against the real
// broker and a loopback model whose first answer carries a broken tool call.
func TestWorkerRepairsProviderToolCalls(t *testing.T) {
	memoryGet := func(id, name string) map[string]any { return toolCall(id, name, `{"scope":"channel"}`) }
	tests := []struct {
		name    string
		calls   []map[string]any
		wantIDs []string
	}{
		{"invalid-name", []map[string]any{memoryGet("call_1", "Memory-Get")}, nil},
		{"long-id", []map[string]any{memoryGet(strings.Repeat("i", 200), "memory_get")}, nil},
		{"duplicate-id", []map[string]any{memoryGet("call_0_1", "memory_get"), memoryGet("call_0_1", "memory_get")},
			[]string{"call_0_1", "call_0_1_1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := newModelServer(t, completion(nil, tc.calls...), completion("Recovered."))
			f := newFixture(t, func(f *fixture) { f.cfg.ModelURL = model.url() })
			f.driver.run = runWorker
			reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello")
			if err != nil || reply != (rtsandbox.Reply{OK: true, Text: "Recovered."}) {
				t.Fatalf("RunTurn = %+v, %v; want ok Recovered.", reply, err)
			}
			if diff := cmp.Diff([]int{200, 200}, f.audit.got()); diff != "" {
				t.Errorf("broker statuses mismatch (-want +got):\n%s", diff)
			}
			bodies := model.gotBodies()
			if len(bodies) != 2 {
				t.Fatalf("model called %d times; want 2", len(bodies))
			}
			ids, replies, assistant := replayedCalls(t, bodies[1])
			if len(ids) != len(tc.calls) || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
				t.Errorf("assistant tool_call ids %q; want %d unique ones", ids, len(tc.calls))
			}
			if !slices.Equal(ids, replies) {
				t.Errorf("tool replies answer %q; want the ids %q in order", replies, ids)
			}
			if tc.wantIDs != nil && !slices.Equal(ids, tc.wantIDs) {
				t.Errorf("ids %q; want %q", ids, tc.wantIDs)
			}
			if tc.name == "invalid-name" && !strings.Contains(assistant, "invalid_tool") {
				t.Errorf("assistant message %s; want invalid_tool", assistant)
			}
			for _, id := range ids {
				if !rtsandbox.ValidToolCallID(id) {
					t.Errorf("replayed id %q is not a valid tool-call id", id)
				}
			}
		})
	}
}

// replayedCalls returns, from a replayed model request, the assistant's
// tool-call ids, the tool replies' tool_call_id values and the assistant
// message as JSON.
func replayedCalls(t *testing.T, body string) (ids, replies []string, assistant string) {
	t.Helper()
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	for _, raw := range req.Messages {
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		switch m.Role {
		case "assistant":
			assistant = string(raw)
			for _, c := range m.ToolCalls {
				ids = append(ids, c.ID)
			}
		case "tool":
			replies = append(replies, m.ToolCallID)
		}
	}
	return ids, replies, assistant
}

func TestTurnEndCancelsHostCallbacks(t *testing.T) {
	started := make(chan context.Context, 1)
	f := newFixture(t, func(f *fixture) {
		f.cfg.Tools = []broker.Tool{hostTool("wait", func(ctx context.Context, _ json.RawMessage, _ rtsandbox.Binding) (string, error) {
			started <- ctx
			<-ctx.Done()
			return "", ctx.Err()
		})}
	})
	callDone := make(chan struct{})
	var toolCtx context.Context
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		go func() {
			defer close(callDone)
			// The answer does not matter: the turn ends under the call.
			_, _, _ = brokerPost(context.Background(), filepath.Join(spec.RunDir, "broker.sock"), wire.ToolRoute("wait"), `{}`)
		}()
		toolCtx = <-started
		return rtsandbox.Reply{OK: true, Text: "Done."}, nil
	}
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello")
	if err != nil || reply.Text != "Done." {
		t.Fatalf("RunTurn = %+v, %v; want Done.", reply, err)
	}
	if toolCtx.Err() == nil {
		t.Error("host tool context still live after the turn ended")
	}
	<-callDone
	assertEmpty(t, f.runRoot)
}

// TestTurnDeadline: the deadline aborts the driver and the error names it.
func TestTurnDeadline(t *testing.T) {
	f := newFixture(t, func(f *fixture) { f.opts.TurnTimeout = time.Second })
	f.driver.run = func(ctx context.Context, _ container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		<-ctx.Done()
		return rtsandbox.Reply{}, errors.Join(container.ErrAborted, context.Cause(ctx))
	}
	start := time.Now()
	_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello")
	if !errors.Is(err, rtsandbox.ErrTurnTimeout) || !errors.Is(err, container.ErrAborted) {
		t.Errorf("RunTurn = %v; want ErrAborted caused by rtsandbox.ErrTurnTimeout", err)
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("turn took %v; want about 1s", d)
	}
	assertEmpty(t, f.runRoot)
}

// TestCallerContextAbortsTurn: cancelling the caller's context ends the turn.
func TestCallerContextAbortsTurn(t *testing.T) {
	f := newFixture(t, nil)
	f.driver.run = func(ctx context.Context, _ container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		<-ctx.Done()
		return rtsandbox.Reply{}, errors.Join(container.ErrAborted, context.Cause(ctx))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := f.rt.RunTurn(ctx, rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); !errors.Is(err, context.Canceled) {
		t.Errorf("RunTurn = %v; want context.Canceled", err)
	}
}

func TestInputLimitsBeforeAnyDirectory(t *testing.T) {
	long := strings.Repeat("x", 257)
	tests := []struct {
		name    string
		channel rtsandbox.ChannelKey
		speaker rtsandbox.Speaker
		text    string
		want    error
	}{
		{"text-32001", "fake:a", speaker("guest"), strings.Repeat("x", 32001), ErrTooLarge},
		{"text-16001-astral", "fake:a", speaker("guest"), strings.Repeat("😀", 16001), ErrTooLarge},
		{"id-257", "fake:a", rtsandbox.Speaker{ID: long, Name: "G", PrincipalID: "p"}, "hi", ErrTooLarge},
		{"name-257", "fake:a", rtsandbox.Speaker{ID: "g", Name: long, PrincipalID: "p"}, "hi", ErrTooLarge},
		{"principal-257", "fake:a", rtsandbox.Speaker{ID: "g", Name: "G", PrincipalID: long}, "hi", ErrTooLarge},
		{"principal-empty", "fake:a", rtsandbox.Speaker{ID: "g", Name: "G"}, "hi", ErrPrincipal},
		{"channel-invalid", "Fake:a", speaker("guest"), "hi", rtsandbox.ErrChannelKey},
		{"channel-newline", "fake:a\nb", speaker("guest"), "hi", rtsandbox.ErrChannelKey},
	}
	f := newFixture(t, nil)
	f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
		t.Error("driver ran")
		return rtsandbox.Reply{}, nil
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: tc.channel, Speaker: tc.speaker}, tc.text); !errors.Is(err, tc.want) {
				t.Errorf("RunTurn = %v; want %v", err, tc.want)
			}
			assertEmpty(t, f.runRoot)
			f.assertNoState(t)
		})
	}
}

// TestInputLimitsCountUTF16: limits are UTF-16 units, not bytes: 32,000
// three-byte BMP characters and 256-unit speaker fields pass.
func TestInputLimitsCountUTF16(t *testing.T) {
	f := newFixture(t, nil)
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	max := strings.Repeat("丁", 256)
	sp := rtsandbox.Speaker{ID: max, Name: max, PrincipalID: max}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: sp}, strings.Repeat("丁", 32000)); err != nil {
		t.Errorf("RunTurn(at the limits) = %v; want nil", err)
	}
}

// TestTurnDirsOwnership: the run dir is 0700 and the socket 0600, owned by
// the worker user (handed over when the service is root); the workspace is
// no host directory at all but the container's own tmpfs.
func TestTurnDirsOwnership(t *testing.T) {
	f := newFixture(t, nil)
	type seen struct {
		Path     string
		Mode     os.FileMode
		UID, GID int
		IsSocket bool
	}
	var got []seen
	f.driver.run = func(_ context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		for _, p := range []string{spec.RunDir, filepath.Join(spec.RunDir, "broker.sock")} {
			fi, err := os.Lstat(p)
			if err != nil {
				t.Error(err)
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			got = append(got, seen{filepath.Base(p), fi.Mode().Perm(), int(st.Uid), int(st.Gid), fi.Mode()&os.ModeSocket != 0})
		}
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatal(err)
	}
	spec := f.driver.gotSpecs()[0]
	want := []seen{
		{filepath.Base(spec.RunDir), 0o700, f.uid, f.gid, false},
		{"broker.sock", 0o600, f.uid, f.gid, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("turn dirs mismatch (-want +got):\n%s", diff)
	}
	if spec.WorkspaceDir != "" || spec.Limits.WorkspaceMB != container.DefaultLimits().WorkspaceMB {
		t.Errorf("workspace %q of %d MiB; want the container's tmpfs of the default size", spec.WorkspaceDir, spec.Limits.WorkspaceMB)
	}
	if name := filepath.Base(spec.RunDir); len(name) != len("turn-XXXXXX") || !strings.HasPrefix(name, "turn-") {
		t.Errorf("run dir name %q; want turn- and 6 characters", name)
	}
}

// legacyWorkspace makes the old per-channel workspace of channel under the
// fixture's legacy root, as a version before host-owned state left it.
func (f *fixture) legacyWorkspace(t *testing.T, channel rtsandbox.ChannelKey) string {
	t.Helper()
	ws := filepath.Join(f.wsRoot, memstore.ChannelID(channel))
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestLegacyWorkspaceMigrated: the one migration path. The first turn of a
// channel with an old workspace gets its memory and history in the turn
// JSON; the host keeps them from then on and the old directory is gone.
// (The memory database imports old workspaces when it opens, so the test
// plants the workspace before the fixture's store opens.)
func TestLegacyWorkspaceMigrated(t *testing.T) {
	var ws string
	f := newPlantedFixture(t, func(f *fixture) {
		ws = f.legacyWorkspace(t, "fake:a")
		mustWrite(t, filepath.Join(ws, "memory.json"), `[{"scope":"channel","key":"topic","text":"Tea"}]`)
		mustWrite(t, filepath.Join(ws, "history.json"), `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`)
		mustWrite(t, filepath.Join(ws, "junk.bin"), "guest scratch")
	}, nil)
	var seen []wire.Turn
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		seen = append(seen, turn)
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	for range 2 {
		if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
			t.Fatal(err)
		}
	}
	want := rtsandbox.ChannelState{
		Memory:  []rtsandbox.MemoryEntry{{Scope: "channel", Key: "topic", Text: "Tea"}},
		History: []rtsandbox.HistoryEntry{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}},
	}
	for i, turn := range seen {
		if diff := cmp.Diff(want, rtsandbox.ChannelState{Memory: turn.Memory, History: turn.History}); diff != "" {
			t.Errorf("turn %d state (-want +got):\n%s", i, diff)
		}
	}
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("legacy workspace after migration: %v; want it removed", err)
	}
}

// TestLegacyWorkspaceFIFODoesNotWedge is finding 4: a FIFO planted at
// memory.json used to hang every later turn of the channel to its
// deadline. Now the host reads legacy files non-blocking: the turn runs at
// once with empty state and the workspace is set aside for the operator.
func TestLegacyWorkspaceFIFODoesNotWedge(t *testing.T) {
	var ws string
	f := newPlantedFixture(t, func(f *fixture) {
		ws = f.legacyWorkspace(t, "fake:a")
		if err := syscall.Mkfifo(filepath.Join(ws, "memory.json"), 0o600); err != nil {
			t.Fatal(err)
		}
	}, func(f *fixture) { f.opts.TurnTimeout = 30 * time.Second })
	var got wire.Turn
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		got = turn
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	start := time.Now()
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("turn took %v; a FIFO must not block it", d)
	}
	if len(got.Memory) != 0 || len(got.History) != 0 {
		t.Errorf("turn state = %+v, %+v; want empty", got.Memory, got.History)
	}
	assertSetAside(t, f, ws)
}

// TestLegacyWorkspaceSymlinksNotFollowed: neither a workspace that is a
// link nor a memory.json that is a link to a host file is read.
func TestLegacyWorkspaceSymlinksNotFollowed(t *testing.T) {
	secret := `[{"scope":"channel","key":"k","text":"host secret"}]`
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, f *fixture) string
	}{
		{"workspace-link", func(t *testing.T, f *fixture) string {
			target := filepath.Join(f.base, "elsewhere")
			mustMkdir(t, target)
			mustWrite(t, filepath.Join(target, "memory.json"), secret)
			mustMkdir(t, f.wsRoot)
			ws := filepath.Join(f.wsRoot, memstore.ChannelID("fake:a"))
			if err := os.Symlink(target, ws); err != nil {
				t.Fatal(err)
			}
			return ws
		}},
		{"memory-link", func(t *testing.T, f *fixture) string {
			hostFile := filepath.Join(f.base, "host.json")
			mustWrite(t, hostFile, secret)
			ws := f.legacyWorkspace(t, "fake:a")
			if err := os.Symlink(hostFile, filepath.Join(ws, "memory.json")); err != nil {
				t.Fatal(err)
			}
			return ws
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws string
			f := newPlantedFixture(t, func(f *fixture) { ws = tc.plant(t, f) }, nil)
			var got wire.Turn
			f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
				got = turn
				return rtsandbox.Reply{OK: true, Text: "ok"}, nil
			}
			if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
				t.Fatal(err)
			}
			if len(got.Memory) != 0 {
				t.Errorf("turn memory = %+v; a link must not be followed", got.Memory)
			}
			assertSetAside(t, f, ws)
		})
	}
}

// assertSetAside checks that a legacy workspace that could not be imported
// is no longer at its name, kept beside it for the operator, and named in
// a warning.
func assertSetAside(t *testing.T, f *fixture, ws string) {
	t.Helper()
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("legacy workspace still in place: %v", err)
	}
	aside, _ := filepath.Glob(ws + ".unmigrated-*")
	if len(aside) != 1 {
		t.Errorf("set-aside copies = %v; want one", aside)
	}
	if !f.audit.has("migration: channel state not imported") {
		t.Error("no operator warning names the set-aside workspace")
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

// TestSwappedRootRefused: a root replaced after setup (its owner or mode
// changed) fails the next turn before any directory is made in it.
func TestSwappedRootRefused(t *testing.T) {
	f := newFixture(t, nil)
	mustChmod(t, f.runRoot, 0o755)
	defer mustChmod(t, f.runRoot, 0o700)
	f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
		t.Error("driver ran")
		return rtsandbox.Reply{}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err == nil {
		t.Error("RunTurn with a run root opened to others = nil; want a refusal")
	}
}

func TestOnTurnStats(t *testing.T) {
	var stats []TurnStats
	f := newFixture(t, func(f *fixture) { f.opts.OnTurn = func(s TurnStats) { stats = append(stats, s) } })
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		mustPost(t, ctx, spec, wire.ToolRoute("none"), `{}`)
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 {
		t.Fatalf("OnTurn called %d times; want 1", len(stats))
	}
	s := stats[0]
	order := []time.Time{s.Admitted, s.Listening, s.Began, s.Created, s.Started, s.FirstCall, s.Exited, s.Removed, s.Ended}
	for i, at := range order {
		if at.IsZero() || (i > 0 && at.Before(order[i-1])) {
			t.Errorf("phase %d at %v is zero or before the previous one (%+v)", i, at, s)
		}
	}
	if s.Calls != 1 || s.Channel != "fake:a" || s.Err != nil {
		t.Errorf("stats %+v; want 1 call on fake:a and no error", s)
	}
}

func TestMakeRunDir(t *testing.T) {
	base := shortTempDir(t)
	long := filepath.Join(base, strings.Repeat("d", 100-len(base)-len("/turn-XXXXXX/broker.sock")))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := makeRunDir(long, owner{}); !errors.Is(err, rtsandbox.ErrSocketPath) {
		t.Errorf("makeRunDir(101-byte socket path) = %v; want rtsandbox.ErrSocketPath", err)
	}
	assertEmpty(t, long)
	fits := long[:len(long)-1]
	if err := os.Mkdir(fits, 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := makeRunDir(fits, owner{})
	if err != nil || len(socketPath(dir)) != 100 {
		t.Errorf("makeRunDir(100-byte socket path) = %q, %v; want a dir", dir, err)
	}
}

func TestRandomSuffix(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		s, err := randomSuffix()
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 6 || strings.Trim(s, suffixAlphabet) != "" {
			t.Fatalf("randomSuffix() = %q; want 6 of [A-Za-z0-9]", s)
		}
		seen[s] = true
	}
	if len(seen) < 990 {
		t.Errorf("%d distinct suffixes of 1000", len(seen))
	}
}

// TestRunRootHasOneRuntime: a second runtime on the same run root is
// refused until the first is disposed (two processes on one state
// directory must not run one channel twice).
func TestRunRootHasOneRuntime(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := New(f.opts); !errors.Is(err, ErrRunRootBusy) {
		t.Fatalf("second New = %v; want ErrRunRootBusy", err)
	}
	f.rt.Close(context.Background())
	rt, err := New(f.opts)
	if err != nil {
		t.Fatalf("New after Close = %v; want nil", err)
	}
	rt.Close(context.Background())
}

// TestStaleRunDirsSwept: run dirs a crashed process left are removed when
// a runtime takes the run root; anything else is left alone.
func TestStaleRunDirsSwept(t *testing.T) {
	f := newFixture(t, nil)
	f.rt.Close(context.Background())
	stale := filepath.Join(f.runRoot, "turn-AbC123")
	if err := os.MkdirAll(filepath.Join(stale, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(f.runRoot, "keep-me")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	rt, err := New(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale run dir still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unrelated entry removed: %v", err)
	}
}
