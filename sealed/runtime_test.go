package sealed

// The runtime's tests, after the reference's runtime tests.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestIdentityAndMounts(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.cfg.Tools = []broker.Tool{hostTool("identity", func(_ context.Context, _ json.RawMessage, tc rtsandbox.Binding) (string, error) {
			return string(tc.Channel) + "/" + tc.Speaker.ID, nil
		})}
	})
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		_, answer := mustPost(t, ctx, spec, wire.ToolRoute("identity"), `{"speaker":{"id":"owner"},"channel":"fake:private"}`)
		return rtsandbox.Reply{OK: true, Text: answer}, nil
	}
	for _, ch := range []rtsandbox.ChannelKey{"fake:a", "fake:b"} {
		reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}, "who am I")
		if err != nil {
			t.Fatalf("RunTurn(%s) = %v", ch, err)
		}
		want := `{"text":"` + string(ch) + `/guest"}`
		if diff := cmp.Diff(rtsandbox.Reply{OK: true, Text: want}, reply); diff != "" {
			t.Errorf("RunTurn(%s) mismatch (-want +got):\n%s", ch, diff)
		}
	}
	for _, in := range f.driver.gotStdins() {
		if strings.Contains(string(in), hostKey) {
			t.Errorf("turn JSON %s contains the host key", in)
		}
	}
	specs := f.driver.gotSpecs()
	if len(specs) != 2 || specs[0].WorkspaceDir != "" || specs[1].WorkspaceDir != "" {
		t.Errorf("specs %v; want two turns on their own tmpfs workspace", specs)
	}
	assertEmpty(t, f.runRoot)
	if n := f.channels(t); n != 2 {
		t.Errorf("the memory database holds %d channels; want the state of each", n)
	}
}

func TestStartFreshDuringActiveTurn(t *testing.T) {
	for _, tc := range []struct {
		name         string
		alreadyFresh bool
	}{{"not-fresh-before", false}, {"already-fresh", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			var resets []bool
			f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
				resets = append(resets, turn.Reset)
				if turn.Text == "active" {
					if err := f.rt.StartFresh("fake:a"); err != nil {
						t.Errorf("StartFresh = %v", err)
					}
				}
				return rtsandbox.Reply{OK: true, Text: "ok"}, nil
			}
			if tc.alreadyFresh {
				if err := f.rt.StartFresh("fake:a"); err != nil {
					t.Fatal(err)
				}
			}
			for _, text := range []string{"active", "next", "settled"} {
				if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, text); err != nil {
					t.Fatalf("RunTurn(%s) = %v", text, err)
				}
			}
			if diff := cmp.Diff([]bool{tc.alreadyFresh, true, false}, resets); diff != "" {
				t.Errorf("reset flags mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartFreshDuringBrokerStartup: a StartFresh right after admission,
// before the turn's broker and container are up, belongs to the next turn.
func TestStartFreshDuringBrokerStartup(t *testing.T) {
	f := newFixture(t, nil)
	var resets []bool
	proceed := make(chan struct{})
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		<-proceed
		resets = append(resets, turn.Reset)
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "first")
		done <- err
	}()
	waitFor(t, "admission", func() bool { return len(f.rt.Busy()) == 1 })
	if err := f.rt.StartFresh("fake:a"); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("first RunTurn = %v", err)
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "second"); err != nil {
		t.Fatalf("second RunTurn = %v", err)
	}
	if diff := cmp.Diff([]bool{false, true}, resets); diff != "" {
		t.Errorf("reset flags mismatch (-want +got):\n%s", diff)
	}
}

func TestStopAndDispose(t *testing.T) {
	f := newFixture(t, nil)
	started := make(chan struct{})
	f.driver.run = func(ctx context.Context, _ container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), rtsandbox.ErrTurnStopped) {
			t.Errorf("turn cause = %v; want rtsandbox.ErrTurnStopped", context.Cause(ctx))
		}
		return rtsandbox.Reply{OK: false, Text: "stopped"}, nil
	}
	type result struct {
		reply rtsandbox.Reply
		err   error
	}
	done := make(chan result, 1)
	go func() {
		reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello")
		done <- result{reply, err}
	}()
	<-started
	if f.rt.Stop("fake:other") {
		t.Error(`Stop("fake:other") = true; want false`)
	}
	if !f.rt.Stop("fake:a") {
		t.Error(`Stop("fake:a") = false; want true`)
	}
	if got := <-done; got.err != nil || got.reply != (rtsandbox.Reply{OK: false, Text: "stopped"}) {
		t.Errorf("RunTurn = %+v, %v; want the stopped reply", got.reply, got.err)
	}
	if busy := f.rt.Busy(); len(busy) != 0 {
		t.Errorf("Busy() = %v; want []", busy)
	}
	assertEmpty(t, f.runRoot)
	f.rt.Close(context.Background())
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "again"); !errors.Is(err, rtsandbox.ErrRuntimeClosed) || rtsandbox.KindOf(err) != rtsandbox.KindStopping {
		t.Errorf("RunTurn after Close = %v; want rtsandbox.ErrRuntimeClosed", err)
	}
}

// TestDisposeAbortsRunningTurns: Close cancels every running turn and
// returns only when all have ended.
func TestDisposeAbortsRunningTurns(t *testing.T) {
	f := newFixture(t, nil)
	var running sync.WaitGroup
	running.Add(2)
	f.driver.run = func(ctx context.Context, _ container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		running.Done()
		<-ctx.Done()
		return rtsandbox.Reply{}, context.Cause(ctx)
	}
	errs := make(chan error, 2)
	for _, ch := range []rtsandbox.ChannelKey{"fake:a", "fake:b"} {
		go func() {
			_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}, "hello")
			errs <- err
		}()
	}
	running.Wait()
	f.rt.Close(context.Background())
	if busy := f.rt.Busy(); len(busy) != 0 {
		t.Errorf("Busy() after Close = %v; want []", busy)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, rtsandbox.ErrRuntimeClosed) {
			t.Errorf("RunTurn = %v; want the rtsandbox.ErrRuntimeClosed cause", err)
		}
	}
	assertEmpty(t, f.runRoot)
}

func TestSetupRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(f *fixture)
	}{
		{"relative-run-root", func(f *fixture) { f.opts.RunRoot = "relative" }},
		{"no-state-store", func(f *fixture) { f.opts.State = nil }},
		{"run-root-slash", func(f *fixture) { f.opts.RunRoot = "/" }},
		{"run-root-too-long", func(f *fixture) { f.opts.RunRoot = filepath.Join(f.base, strings.Repeat("r", 80)) }},
		{"uid-0", func(f *fixture) { f.opts.UID = 0 }},
		{"gid-0", func(f *fixture) { f.opts.GID = 0 }},
		{"uid-negative", func(f *fixture) { f.opts.UID = -1 }},
		{"turn-timeout-negative", func(f *fixture) { f.opts.TurnTimeout = -time.Millisecond }},
		{"turn-timeout-999ms", func(f *fixture) { f.opts.TurnTimeout = 999 * time.Millisecond }},
		{"turn-timeout-601s", func(f *fixture) { f.opts.TurnTimeout = 601 * time.Second }},
		{"limits-cpus-0", func(f *fixture) { f.opts.Limits = container.Limits{MemoryMB: 512, CPUs: 0, PIDs: 64, WorkspaceMB: 64} }},
		{"limits-memory-63", func(f *fixture) { f.opts.Limits = container.Limits{MemoryMB: 63, CPUs: 1, PIDs: 64, WorkspaceMB: 63} }},
		{"limits-pids-7", func(f *fixture) { f.opts.Limits = container.Limits{MemoryMB: 512, CPUs: 1, PIDs: 7, WorkspaceMB: 64} }},
		{"limits-workspace-0", func(f *fixture) { f.opts.Limits = container.Limits{MemoryMB: 512, CPUs: 1, PIDs: 64} }},
		{"limits-workspace-over-memory", func(f *fixture) { f.opts.Limits = container.Limits{MemoryMB: 512, CPUs: 1, PIDs: 64, WorkspaceMB: 513} }},
		{"time-zone-not-a-zone", func(f *fixture) { f.opts.TimeZone = "not-a-zone" }},
		{"time-zone-local", func(f *fixture) { f.opts.TimeZone = "Local" }},
		{"model-blank", func(f *fixture) { f.opts.Model = "  " }},
		{"model-api-unknown", func(f *fixture) { f.opts.ModelAPI = "gemini" }},
		{"thinking-unknown", func(f *fixture) { f.opts.Thinking = "max" }},
		{"image-option-injection", func(f *fixture) { f.opts.Image = "--privileged" }},
		{"image-empty", func(f *fixture) { f.opts.Image = "" }},
		{"installation-invalid", func(f *fixture) { f.opts.Installation = "Bad Id" }},
		{"broker-missing", func(f *fixture) { f.opts.Broker = nil }},
		{"driver-missing", func(f *fixture) { f.opts.Driver = nil }},
		{"runtime-unknown", func(f *fixture) { f.opts.Runtime = "kata" }},
	}
	if os.Getuid() != 0 { // only a root service may hand turns to another user
		tests = append(tests, struct {
			name string
			edit func(f *fixture)
		}{"worker-user-not-own-ids", func(f *fixture) { f.opts.UID++ }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil) // a valid baseline, built once to prove it works
			opts := f.opts
			g := &fixture{base: f.base, opts: opts}
			tc.edit(g)
			rt, err := New(g.opts)
			if err == nil {
				rt.Close(context.Background())
				t.Fatalf("New(%s) = nil error; want a refusal", tc.name)
			}
			if !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("New(%s) = %v; want an error wrapping ErrInvalid", tc.name, err)
			}
		})
	}
}

func TestPrincipalStaysOnHost(t *testing.T) {
	model := newModelServer(t, completion("hi"))
	f := newFixture(t, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.cfg.Tools = []broker.Tool{hostTool("whom", func(_ context.Context, _ json.RawMessage, tc rtsandbox.Binding) (string, error) {
			b, err := json.Marshal(tc.Speaker)
			return string(b), err
		})}
	})
	f.driver.run = func(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		if want := (wire.TurnSpeaker{ID: "guest", Name: "Guest"}); turn.Speaker != want {
			t.Errorf("turn speaker = %+v; want %+v", turn.Speaker, want)
		}
		_, whom := mustPost(t, ctx, spec, wire.ToolRoute("whom"), `{"speaker":{"principalId":"owner","principal_id":"owner"}}`)
		status, _ := mustPost(t, ctx, spec, wire.RouteModel, `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 {
			t.Errorf("/model status = %d; want 200", status)
		}
		return rtsandbox.Reply{OK: true, Text: whom}, nil
	}
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest"), Tier: rtsandbox.TierMember}, "hello")
	if err != nil {
		t.Fatalf("RunTurn = %v", err)
	}
	if want := `{"text":"{\"id\":\"guest\",\"name\":\"Guest\",\"principal_id\":\"p_guest\"}"}`; reply.Text != want {
		t.Errorf("whom = %s; want %s", reply.Text, want)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(f.driver.gotStdins()[0], &raw); err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw["speaker"]), `{"id":"guest","name":"Guest"}`; got != want {
		t.Errorf("turn JSON speaker = %s; want exactly %s", got, want)
	}
	if h := model.gotHeaders(); len(h) != 1 || h[0].Get("Authorization") != "Bearer "+hostKey {
		t.Errorf("upstream headers %v; want one call with the host key", h)
	}
	want := []rtsandbox.Binding{{Channel: "fake:a", Speaker: speaker("guest"), Tier: rtsandbox.TierMember}}
	if diff := cmp.Diff(want, f.gotScopes()); diff != "" {
		t.Errorf("key scopes mismatch (-want +got):\n%s", diff)
	}
}

// The Binding RunTurn receives is the one every call of the turn runs for:
// a host tool and the model's credential getter see its tier, whatever
// the request body claims.
func TestBindingTierReachesHostTool(t *testing.T) {
	for _, tier := range []rtsandbox.Tier{rtsandbox.TierMember, rtsandbox.TierOwner} {
		t.Run(tier.String(), func(t *testing.T) {
			model := newModelServer(t, completion("hi"))
			f := newFixture(t, func(f *fixture) {
				f.cfg.ModelURL = model.url()
				f.cfg.Tools = []broker.Tool{hostTool("tier", func(_ context.Context, _ json.RawMessage, b rtsandbox.Binding) (string, error) {
					return b.Tier.String(), nil
				})}
			})
			f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
				_, got := mustPost(t, ctx, spec, wire.ToolRoute("tier"), `{"tier":"owner","Tier":2}`)
				mustPost(t, ctx, spec, wire.RouteModel, `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`)
				return rtsandbox.Reply{OK: true, Text: got}, nil
			}
			b := rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest"), Tier: tier}
			reply, err := f.rt.RunTurn(context.Background(), b, "hello")
			if err != nil {
				t.Fatalf("RunTurn = %v", err)
			}
			if want := `{"text":"` + tier.String() + `"}`; reply.Text != want {
				t.Errorf("host tool saw %s; want %s", reply.Text, want)
			}
			if diff := cmp.Diff([]rtsandbox.Binding{b}, f.gotScopes()); diff != "" {
				t.Errorf("credential getter bindings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMissingPrincipal(t *testing.T) {
	for _, tc := range []struct {
		name, principal string
		want            error
	}{
		{"empty", "", ErrPrincipal},
		{"257-units", strings.Repeat("p", 257), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
				t.Error("driver ran")
				return rtsandbox.Reply{}, nil
			}
			sp := rtsandbox.Speaker{ID: "guest", Name: "Guest", PrincipalID: tc.principal}
			if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: sp}, "hello"); !errors.Is(err, tc.want) {
				t.Errorf("RunTurn(principal %q) = %v; want %v", tc.principal, err, tc.want)
			}
			assertEmpty(t, f.runRoot)
			f.assertNoState(t)
		})
	}
}

// TestWorkerToolsComeFromTheBroker: the runtime has no tool option of its
// own; the turn JSON declares exactly the broker's host tools and MCP
// servers, and a declaration the worker would refuse (bad or duplicate
// names, parameters that are not an object) is refused when the broker
// is built, so no runtime can be set up with it.
// workerTurn runs one turn of f and returns the turn the worker got.
func workerTurn(t *testing.T, f *fixture) wire.Turn {
	t.Helper()
	var got wire.Turn
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		got = turn
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatalf("RunTurn = %v", err)
	}
	return got
}

// The model settings reach the worker in the turn JSON: absent by default
// (an older worker reads the turn as before), as set otherwise.
func TestModelSettingsReachTheTurn(t *testing.T) {
	tests := []struct {
		name string
		edit func(o *Options)
		want string // the model fields of the turn JSON
	}{
		{"default", func(*Options) {}, ``},
		{"anthropic", func(o *Options) { o.ModelAPI, o.ModelStream, o.Thinking = rtsandbox.ModelAPIAnthropic, true, "high" },
			`,"modelApi":"anthropic","stream":true,"thinking":"high"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(f *fixture) { tc.edit(&f.opts) })
			b, _ := jsonjs.Marshal(workerTurn(t, f))
			_, fields, _ := strings.Cut(string(b), `"mcp":[]`)
			if diff := cmp.Diff(tc.want+"}", fields); diff != "" {
				t.Errorf("turn JSON after mcp (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkerToolsComeFromTheBroker(t *testing.T) {
	params := json.RawMessage(`{"type":"object"}`)
	f := newFixture(t, func(f *fixture) {
		f.cfg.Tools = []broker.Tool{hostTool("lookup", func(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) { return "", nil })}
		f.cfg.MCP = []broker.MCPServer{{Name: "docs", URL: upstream.MustParseEndpoint("http://127.0.0.1:9/rpc", true), Tools: []rtsandbox.ToolSpec{{Name: "find", Parameters: params}}}}
	})
	got := workerTurn(t, f)
	tools, mcp := f.opts.Broker.Declarations()
	if diff := cmp.Diff(tools, got.Tools); diff != "" {
		t.Errorf("turn tools (-broker +turn):\n%s", diff)
	}
	if diff := cmp.Diff(mcp, got.MCP); diff != "" {
		t.Errorf("turn MCP servers (-broker +turn):\n%s", diff)
	}
	if len(got.Tools) != 1 || got.Tools[0].Name != "lookup" || len(got.MCP) != 1 || got.MCP[0].Server != "docs" {
		t.Errorf("turn declares %+v and %+v; want lookup and docs", got.Tools, got.MCP)
	}

	noop := rtsandbox.HostToolFunc(func(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) { return "", nil })
	for name, edit := range map[string]func(*broker.Config){
		"tool-name-invalid": func(c *broker.Config) {
			c.Tools = []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "Bad", Parameters: params}, Impl: noop}}
		},
		"tool-parameters-not-object": func(c *broker.Config) {
			c.Tools = []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "ok", Parameters: json.RawMessage(`[]`)}, Impl: noop}}
		},
		"tool-parameters-null": func(c *broker.Config) {
			c.Tools = []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "ok", Parameters: json.RawMessage(`null`)}, Impl: noop}}
		},
		"mcp-server-duplicate": func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "a", URL: upstream.MustParseEndpoint("http://127.0.0.1:9/a", true)}, {Name: "a", URL: upstream.MustParseEndpoint("http://127.0.0.1:9/b", true)}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := f.cfg
			edit(&cfg)
			if _, err := broker.New(cfg); !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("broker.New = %v; want an error wrapping ErrInvalid", err)
			}
		})
	}
}

// TestRunAsRuntime: the sealed runtime's Run gives its worker the sealed
// text (the attachments notice for the message's own files), answers with
// no files, names the sealed mode and the channel's profile in Status, and
// has nothing to Remove.
func TestRunAsRuntime(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.opts.ProfileFor = func(ch rtsandbox.ChannelKey) string { return "p-" + ch.LocalID() }
	})
	var got []string
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		got = append(got, turn.Text)
		return rtsandbox.Reply{OK: true, Text: "seen"}, nil
	}
	ctx, b := context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}
	in := rtsandbox.TurnInput{MessageID: "m1", Text: "look", Attached: 1,
		Attachments: []rtsandbox.Attachment{{Name: "a.png", Data: []byte{1}}}}
	a, err := f.rt.Run(ctx, b, in, nil)
	if err != nil || a.Reply.Text != "seen" || a.Files != nil {
		t.Fatalf("Run = %+v, %v; want the reply and no files", a, err)
	}
	if diff := cmp.Diff([]string{"look\n" + rtsandbox.AttachmentsUnsupportedText}, got); diff != "" {
		t.Errorf("worker's text (-want +got):\n%s", diff)
	}
	st, err := f.rt.Status(ctx, "fake:a")
	if want := (rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: "p-a"}); err != nil || st != want {
		t.Errorf("Status = %+v, %v; want %+v", st, err, want)
	}
	if err := f.rt.Remove(ctx, "fake:a"); err != nil {
		t.Errorf("Remove = %v; want nil", err)
	}
}
