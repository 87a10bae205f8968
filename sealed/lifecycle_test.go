package sealed

// The lifecycle tests, after the reference's.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestDriverFailure(t *testing.T) {
	errDriver := errors.New("driver failed")
	for _, tc := range []struct {
		name string
		fail func() (rtsandbox.Reply, error)
	}{
		{"returns-not-ok", func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: false, Text: "failed"}, nil }},
		{"throws", func() (rtsandbox.Reply, error) { return rtsandbox.Reply{}, errDriver }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			kept := rtsandbox.ChannelState{
				Memory:  []rtsandbox.MemoryEntry{{Scope: "channel", Key: "note", Text: "keep me"}},
				History: []rtsandbox.HistoryEntry{},
			}
			if err := f.state.Save(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, kept); err != nil {
				t.Fatal(err)
			}
			var resets []bool
			var memories [][]rtsandbox.MemoryEntry
			f.driver.run = func(_ context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
				resets = append(resets, turn.Reset)
				memories = append(memories, turn.Memory)
				if turn.Text == "first" {
					return tc.fail()
				}
				return rtsandbox.Reply{OK: true, Text: "ok"}, nil
			}
			if err := f.rt.StartFresh("fake:a"); err != nil {
				t.Fatal(err)
			}
			reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "first")
			want, wantErr := tc.fail()
			if reply != want || !errors.Is(err, wantErr) {
				t.Errorf("first RunTurn = %+v, %v; want %+v, %v", reply, err, want, wantErr)
			}
			if busy := f.rt.Busy(); len(busy) != 0 {
				t.Errorf("Busy() = %v; want []", busy)
			}
			assertEmpty(t, f.runRoot)
			if got, err := f.state.Load(context.Background(), "fake:a"); err != nil || !cmp.Equal(kept, got) {
				t.Errorf("state after the failure = %+v, %v; want it kept", got, err)
			}
			for _, text := range []string{"retry", "next"} {
				if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, text); err != nil {
					t.Fatalf("RunTurn(%s) = %v", text, err)
				}
			}
			if diff := cmp.Diff([]bool{true, true, false}, resets); diff != "" {
				t.Errorf("reset flags mismatch (-want +got):\n%s", diff)
			}
			for i, m := range memories {
				if !cmp.Equal(kept.Memory, m) {
					t.Errorf("turn %d memory = %+v; want the kept memory every turn", i, m)
				}
			}
			var runDirs []string
			for _, s := range f.driver.gotSpecs() {
				runDirs = append(runDirs, s.RunDir)
			}
			if slices.Sort(runDirs); len(slices.Compact(runDirs)) != 3 {
				t.Errorf("run dirs %v; want three different ones", runDirs)
			}
			assertEmpty(t, f.runRoot)
		})
	}
}

func TestConcurrency(t *testing.T) {
	f := newFixture(t, nil)
	release := make(chan struct{})
	f.driver.run = func(ctx context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: turn.Text}, nil
	}
	type result struct {
		reply rtsandbox.Reply
		err   error
	}
	a, b := make(chan result, 1), make(chan result, 1)
	go func() {
		reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "a")
		a <- result{reply, err}
	}()
	waitFor(t, "fake:a admitted", func() bool { return len(f.rt.Busy()) == 1 })
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "again"); !errors.Is(err, rtsandbox.ErrBusy) ||
		!strings.Contains(err.Error(), "channel is busy") { // the reference's test: a message containing it
		t.Errorf("second fake:a RunTurn = %v; want channel is busy", err)
	}
	go func() {
		reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:b", Speaker: speaker("guest")}, "b")
		b <- result{reply, err}
	}()
	waitFor(t, "both drivers running", func() bool { return len(f.driver.gotSpecs()) == 2 })
	if diff := cmp.Diff([]rtsandbox.ChannelKey{"fake:a", "fake:b"}, f.rt.Busy()); diff != "" {
		t.Errorf("Busy() mismatch (-want +got):\n%s", diff)
	}
	if got := entries(t, f.runRoot); len(got) != 2 {
		t.Errorf("run root holds %v; want 2 run dirs", got)
	}
	close(release)
	for name, ch := range map[string]chan result{"a": a, "b": b} {
		if got := <-ch; got.err != nil || got.reply.Text != name {
			t.Errorf("turn %s = %+v; want ok %s", name, got, name)
		}
	}
	if busy := f.rt.Busy(); len(busy) != 0 {
		t.Errorf("Busy() = %v; want []", busy)
	}
	assertEmpty(t, f.runRoot)
}

func TestOptionNormalization(t *testing.T) {
	limits := container.Limits{MemoryMB: 256, CPUs: 0.5, PIDs: 32, WorkspaceMB: 16}
	f := newFixture(t, func(f *fixture) {
		f.opts.RunRoot = f.runRoot + "/../run"
		f.opts.Prompt = "Use the supplied tools"
		f.opts.TimeZone = "Asia/Taipei"
		f.opts.Limits = limits
	})
	canonRun, err := filepath.EvalSymlinks(f.runRoot)
	if err != nil {
		t.Fatal(err)
	}
	sp := speaker("guest")
	proceed := make(chan struct{})
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		<-proceed
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: sp}, "hello")
		done <- err
	}()
	waitFor(t, "driver", func() bool { return len(f.driver.gotSpecs()) == 1 })
	sp.ID, sp.Name = "owner", "Owner" // the turn took a copy at admission
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("RunTurn = %v", err)
	}
	spec := f.driver.gotSpecs()[0]
	if spec.UID != f.uid || spec.GID != f.gid || spec.Limits != limits {
		t.Errorf("spec user %d:%d limits %+v; want %d:%d %+v", spec.UID, spec.GID, spec.Limits, f.uid, f.gid, limits)
	}
	if filepath.Dir(spec.RunDir) != canonRun {
		t.Errorf("run dir %s; want one under %s", spec.RunDir, canonRun)
	}
	want := `{"text":"hello","speaker":{"id":"guest","name":"Guest"},"model":"fake","prompt":"Use the supplied tools",` +
		`"timeZone":"Asia/Taipei","reset":false,"memory":[],"history":[],"tools":[],"mcp":[]}`
	if got := string(f.driver.gotStdins()[0]); got != want {
		t.Errorf("turn JSON =\n%s\nwant\n%s", got, want)
	}
}

// TestDefaults: an empty prompt, zone, deadline and limits take the
// documented defaults, and the spec carries the installation's labels.
func TestDefaults(t *testing.T) {
	f := newFixture(t, nil)
	var deadline time.Duration
	f.driver.run = func(ctx context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		d, _ := ctx.Deadline()
		deadline = time.Until(d)
		if turn.Prompt != DefaultPrompt || turn.TimeZone != "UTC" {
			t.Errorf("turn prompt %q zone %q; want the defaults", turn.Prompt, turn.TimeZone)
		}
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatal(err)
	}
	if deadline < DefaultTurnTimeout-5*time.Second || deadline > DefaultTurnTimeout {
		t.Errorf("turn deadline in %v; want about %v", deadline, DefaultTurnTimeout)
	}
	spec := f.driver.gotSpecs()[0]
	labels, _ := container.TurnLabels("test-sandbox")
	if diff := cmp.Diff(labels, spec.Labels); diff != "" || spec.Limits != container.DefaultLimits() {
		t.Errorf("spec labels (-want +got):\n%s limits %+v", diff, spec.Limits)
	}
}
