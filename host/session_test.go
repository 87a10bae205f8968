package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/wire"
)

// fakeSession records what the mux asks of the session runtime.
type fakeSession struct {
	status    rtsandbox.RuntimeStatus
	statusErr error
	closeErr  error

	mu    sync.Mutex
	calls []string // "<method> <channel>"
}

func (f *fakeSession) record(method string, ch rtsandbox.ChannelKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method+" "+string(ch))
}

func (f *fakeSession) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeSession) Run(_ context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, _ func(int, string)) (rtsandbox.Answer, error) {
	f.record(fmt.Sprintf("run %d", len(in.Attachments)), b.Channel)
	return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true, Text: "Session."}, Files: []rtsandbox.File{{Name: "a.txt", Data: []byte("x")}}}, nil
}

// runText runs a turn of text alone through rt and returns its reply.
func runText(ctx context.Context, rt rtsandbox.Runtime, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	a, err := rt.Run(ctx, b, rtsandbox.TurnInput{Text: text}, nil)
	return a.Reply, err
}

func (f *fakeSession) StartFresh(ch rtsandbox.ChannelKey) error { f.record("fresh", ch); return nil }
func (f *fakeSession) Stop(ch rtsandbox.ChannelKey) bool        { f.record("stop", ch); return true }
func (f *fakeSession) Remove(_ context.Context, ch rtsandbox.ChannelKey) error {
	f.record("remove", ch)
	return nil
}

func (f *fakeSession) Status(_ context.Context, ch rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	f.record("status", ch)
	return f.status, f.statusErr
}

func (f *fakeSession) Close(context.Context) error { f.record("close", ""); return f.closeErr }

var _ SessionRuntime = (*fakeSession)(nil)

// muxConfig parses a config whose discord:1 is a session channel and
// every other channel sealed.
func muxConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"profiles: {studio: {mode: session}}\nchannels_profile: {'discord:1': studio}\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMuxRunByMode: a session channel's runtime takes the attachments
// and its files come back; a sealed channel's runtime gets the same input
// untouched (it adds the attachments notice itself: TurnInput.SealedText),
// and no file comes back.
func TestMuxRunByMode(t *testing.T) {
	in := rtsandbox.TurnInput{MessageID: "m1", Text: "look", Attachments: []rtsandbox.Attachment{{Name: "a.png", Data: []byte{1}}}, Attached: 1}
	sealed, session := &fakeruntime.Runtime{}, &fakeSession{}
	m := newRuntimeMux(muxConfig(t, ""), sealed, session)

	a, err := m.Run(context.Background(), rtsandbox.Binding{Channel: "discord:1"}, in, nil)
	if err != nil || a.Reply.Text != "Session." || len(a.Files) != 1 {
		t.Errorf("session answer = %+v, %v", a, err)
	}
	if diff := cmp.Diff([]string{"run 1 discord:1"}, session.Calls()); diff != "" {
		t.Errorf("session calls (-want +got):\n%s", diff)
	}

	a, err = m.Run(context.Background(), rtsandbox.Binding{Channel: "discord:2"}, in, nil)
	if err != nil || a.Reply.Text != "Sealed." || a.Files != nil {
		t.Errorf("sealed answer = %+v, %v", a, err)
	}
	calls := sealed.Calls()
	if len(calls) != 1 {
		t.Fatalf("sealed calls = %+v; want one", calls)
	}
	if diff := cmp.Diff(in, calls[0].Input()); diff != "" {
		t.Errorf("sealed input (-want +got):\n%s", diff)
	}
}

func TestMuxRoutesByProfile(t *testing.T) {
	tests := []struct {
		name        string
		channel     rtsandbox.ChannelKey
		preview     bool
		wantReply   string
		wantSession []string
		wantSealed  int
	}{
		{"sealed-channel-goes-to-sealed", "discord:2", false, "Sealed.", nil, 1},
		{"sealed-channel-keeps-previews", "discord:2", true, "Sealed.", nil, 1},
		{"session-channel-goes-to-session", "discord:1", false, "Session.", []string{"run 0 discord:1"}, 0},
		{"session-channel-ignores-preview-observer", "discord:1", true, "Session.", []string{"run 0 discord:1"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sealed, session := &fakeruntime.Runtime{}, &fakeSession{}
			m := newRuntimeMux(muxConfig(t, ""), sealed, session)
			b := rtsandbox.Binding{Channel: tt.channel}
			var onText func(int, string)
			if tt.preview {
				onText = func(int, string) {}
			}
			a, err := m.Run(context.Background(), b, rtsandbox.TurnInput{Text: "hi"}, onText)
			if reply := a.Reply; err != nil || reply.Text != tt.wantReply {
				t.Errorf("turn = %+v, %v; want %q", a.Reply, err, tt.wantReply)
			}
			if diff := cmp.Diff(tt.wantSession, session.Calls()); diff != "" {
				t.Errorf("session calls (-want +got):\n%s", diff)
			}
			calls := sealed.Calls()
			if len(calls) != tt.wantSealed {
				t.Fatalf("sealed turns = %d; want %d", len(calls), tt.wantSealed)
			}
			if tt.wantSealed == 1 && (calls[0].OnText != nil) != tt.preview {
				t.Errorf("sealed turn's text observer set = %v; want %v", calls[0].OnText != nil, tt.preview)
			}
		})
	}
}

func TestMuxOwnerCommandsPerMode(t *testing.T) {
	sealed, session := &fakeruntime.Runtime{}, &fakeSession{
		status: rtsandbox.RuntimeStatus{Mode: "whatever", Profile: "stale", Container: rtsandbox.ContainerRunning},
	}
	m := newRuntimeMux(muxConfig(t, ""), sealed, session)
	ctx := context.Background()
	for _, ch := range []rtsandbox.ChannelKey{"discord:1", "discord:2"} {
		if err := m.StartFresh(ch); err != nil {
			t.Errorf("StartFresh(%s): %v", ch, err)
		}
		m.Stop(ch)
		if err := m.Remove(ctx, ch); err != nil {
			t.Errorf("Remove(%s): %v", ch, err)
		}
	}
	// Remove goes to the session runtime for every channel: a container an
	// earlier session profile left goes too.
	want := []string{"fresh discord:1", "stop discord:1", "remove discord:1", "remove discord:2"}
	if diff := cmp.Diff(want, session.Calls()); diff != "" {
		t.Errorf("session calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{"discord:2"}, sealed.Fresh()); diff != "" {
		t.Errorf("sealed StartFresh (-want +got):\n%s", diff)
	}

	statusTests := []struct {
		channel rtsandbox.ChannelKey
		want    rtsandbox.RuntimeStatus
	}{
		{"discord:1", rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: "studio", Container: rtsandbox.ContainerRunning}},
		{"discord:2", rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: config.DefaultProfile}},
	}
	for _, tt := range statusTests {
		got, err := m.Status(ctx, tt.channel)
		if err != nil {
			t.Errorf("Status(%s): %v", tt.channel, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Status(%s) (-want +got):\n%s", tt.channel, diff)
		}
	}
}

// A channel whose profile changes takes the new mode with its next call:
// the mux asks the profile on every call and keeps nothing per channel.
func TestMuxProfileChange(t *testing.T) {
	sealed, session := &fakeruntime.Runtime{}, &fakeSession{}
	mode := config.ModeSealed
	m := &runtimeMux{sealed: sealed, session: session, profile: func(rtsandbox.ChannelKey) (string, config.Profile) {
		return "p", config.Profile{Mode: mode}
	}}
	ctx, b := context.Background(), rtsandbox.Binding{Channel: "http:lobby"}
	if r, _ := runText(ctx, m, b, "1"); r.Text != "Sealed." {
		t.Errorf("first turn = %q; want the sealed runtime's", r.Text)
	}
	mode = config.ModeSession
	if r, _ := runText(ctx, m, b, "2"); r.Text != "Session." {
		t.Errorf("turn after the change to session = %q; want the session runtime's", r.Text)
	}
	mode = config.ModeSealed
	if r, _ := runText(ctx, m, b, "3"); r.Text != "Sealed." {
		t.Errorf("turn after the change back = %q; want the sealed runtime's", r.Text)
	}
	if len(sealed.Calls()) != 2 || len(session.Calls()) != 1 {
		t.Errorf("sealed %d, session %v; want 2 sealed turns and 1 session turn", len(sealed.Calls()), session.Calls())
	}
	// The same holds across a restart with a changed config.
	before := newRuntimeMux(muxConfig(t, ""), sealed, session)
	after := newRuntimeMux(muxConfig(t, "default_profile: studio\n"), sealed, session)
	if st, _ := before.Status(ctx, "discord:9"); st.Mode != rtsandbox.ModeSealed {
		t.Errorf("before: mode %q; want sealed", st.Mode)
	}
	if st, _ := after.Status(ctx, "discord:9"); st.Mode != rtsandbox.ModeSession || st.Profile != "studio" {
		t.Errorf("after: %+v; want session, studio", st)
	}
}

// Without a session runtime a session channel fails closed: no turn runs
// in the sealed runtime in its place, and status says it does not know.
func TestMuxWithoutSessionRuntime(t *testing.T) {
	sealed := &fakeruntime.Runtime{}
	m := newRuntimeMux(muxConfig(t, ""), sealed, nil)
	ctx := context.Background()
	if _, err := runText(ctx, m, rtsandbox.Binding{Channel: "discord:1"}, "x"); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("session turn without a session runtime = %v; want ErrInvalid", err)
	}
	if err := m.StartFresh("discord:1"); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("fresh = %v; want ErrInvalid", err)
	}
	if m.Stop("discord:1") {
		t.Error("stop reported a running turn")
	}
	if err := m.Remove(ctx, "discord:1"); err != nil {
		t.Errorf("remove = %v; want nil (nothing to remove)", err)
	}
	if st, err := m.Status(ctx, "discord:1"); err == nil || st.Mode != rtsandbox.ModeSession || st.Profile != "studio" {
		t.Errorf("status = %+v, %v; want session, studio and an error", st, err)
	}
	if len(sealed.Calls()) != 0 || len(sealed.Fresh()) != 0 {
		t.Error("a session channel's work reached the sealed runtime")
	}
}

// The router, driven through the mux, answers each owner command per mode.
func TestRouterOwnerCommandsThroughMux(t *testing.T) {
	sealed, session := &fakeruntime.Runtime{}, &fakeSession{status: rtsandbox.RuntimeStatus{Container: rtsandbox.ContainerStopped}}
	chans := &memChannels{on: map[rtsandbox.ChannelKey]bool{"discord:1": true, "discord:2": true}}
	r, err := router.New(router.Options{Door: door.New(nil), Channels: chans, Runtime: newRuntimeMux(muxConfig(t, ""), sealed, session),
		Access: ownerOnly{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	cmd := func(ch rtsandbox.ChannelKey, action string) string {
		text, _ := r.Command(ctx, router.Command{Channel: ch, Author: router.Author{ID: "owner"}, Action: action})
		return text
	}
	tests := []struct {
		channel rtsandbox.ChannelKey
		action  string
		want    string
	}{
		{"discord:1", router.ActionStatus, rtsandbox.EnabledSessionText + "\nMode: session (one long-lived container). Profile: studio. Container: stopped."},
		{"discord:2", router.ActionStatus, rtsandbox.EnabledText + "\nMode: sealed (a fresh container every turn). Profile: default."},
		{"discord:1", router.ActionFresh, rtsandbox.FreshText},
		{"discord:1", router.ActionStop, rtsandbox.StoppedText},
		{"discord:1", router.ActionOff, rtsandbox.DisabledText},
	}
	for _, tt := range tests {
		if got := cmd(tt.channel, tt.action); got != tt.want {
			t.Errorf("%s in %s = %q; want %q", tt.action, tt.channel, got, tt.want)
		}
	}
	want := []string{"status discord:1", "fresh discord:1", "stop discord:1", "remove discord:1"}
	if diff := cmp.Diff(want, session.Calls()); diff != "" {
		t.Errorf("session calls (-want +got):\n%s", diff)
	}
}

func TestWorkerUserWhenRoot(t *testing.T) {
	named := &config.Config{Sandbox: config.Sandbox{User: "65534:65534", UID: 65534, GID: 65534}}
	tests := []struct {
		name     string
		cfg      *config.Config
		euid     int
		uid, gid int
		wantErr  bool
	}{
		{"root-without-sandbox-user-refused", &config.Config{}, 0, 0, 0, true},
		{"root-with-sandbox-user", named, 0, 65534, 65534, false},
		{"non-root-runs-as-itself", &config.Config{}, 1000, 1000, 1001, false},
		{"non-root-with-sandbox-user", named, 1000, 65534, 65534, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, gid, err := workerUserOf(tt.cfg, tt.euid, 1001)
			if (err != nil) != tt.wantErr || uid != tt.uid || gid != tt.gid {
				t.Errorf("workerUserOf(euid %d) = %d, %d, %v; want %d, %d, error %v", tt.euid, uid, gid, err, tt.uid, tt.gid, tt.wantErr)
			}
			if uid == 0 && err == nil {
				t.Error("the worker would run as root")
			}
		})
	}
}

type memChannels struct {
	mu sync.Mutex
	on map[rtsandbox.ChannelKey]bool
}

func (m *memChannels) Enabled(k rtsandbox.ChannelKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on[k]
}
func (m *memChannels) Enable(k rtsandbox.ChannelKey) error { return m.set(k, true) }
func (m *memChannels) Disable(k rtsandbox.ChannelKey) error {
	return m.set(k, false)
}

func (m *memChannels) set(k rtsandbox.ChannelKey, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on[k] = on
	return nil
}

// ownerOnly resolves everyone as the owner.
type ownerOnly struct{}

func (ownerOnly) Resolve(a access.Actor) (rtsandbox.Speaker, access.Tier) {
	return rtsandbox.Speaker{ID: a.Subject, Name: a.Name, PrincipalID: a.Subject}, access.Owner
}

// A channel mapped to a profile the file does not define never reaches
// the mux: the config is refused when it is loaded.
func TestUnknownProfileRefusedAtLoad(t *testing.T) {
	_, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"profiles: {studio: {mode: session}}\nchannels_profile: {'discord:1': studoi}\n"))
	if !errors.Is(err, rtsandbox.ErrInvalid) || !strings.Contains(err.Error(), `channels_profile["discord:1"]: must name a profile`) {
		t.Errorf("Parse = %v; want the unknown profile refused, naming the key", err)
	}
}

// A host built without the session runtime refuses a session profile
// before it starts anything.
func TestNewRefusesSessionProfileWithoutRuntime(t *testing.T) {
	cfg := muxConfig(t, "http: {token_env: T}\n")
	_, err := New(context.Background(), Options{Config: cfg, Getenv: func(string) string { return "" }, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrNoSessionRuntime) {
		t.Errorf("New = %v; want ErrNoSessionRuntime", err)
	}
}

// Shutdown closes the session runtime (brokers stop, containers stay)
// before the sealed runtime's closer, which was registered before it.
func TestSessionRuntimeClosesBeforeSealed(t *testing.T) {
	var order []string
	h := &Host{log: slog.New(slog.DiscardHandler)}
	h.closers = append(h.closers, func() error { order = append(order, "sealed"); return nil })
	fs := &fakeSession{}
	var got SessionDeps
	s := Sessions{Runtime: func(_ context.Context, d SessionDeps) (SessionRuntime, error) {
		got = d
		return closeRecorder{fs, &order}, nil
	}}
	cfg := muxConfig(t, "")
	rt, err := h.startSessions(context.Background(), s, SessionDeps{Config: cfg, ProfileFor: profileName(cfg)})
	if err != nil || rt == nil {
		t.Fatalf("startSessions = %v, %v", rt, err)
	}
	if p := got.ProfileFor("discord:1"); p != "studio" {
		t.Errorf("ProfileFor(discord:1) = %q; want studio", p)
	}
	if err := h.closeAll(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"session", "sealed"}, order); diff != "" {
		t.Errorf("close order (-want +got):\n%s", diff)
	}
}

// Without a session profile no session runtime is built, even when the
// host could build one.
func TestNoSessionRuntimeWithoutSessionProfile(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{}
	built := false
	rt, err := h.startSessions(context.Background(), Sessions{Runtime: func(context.Context, SessionDeps) (SessionRuntime, error) {
		built = true
		return &fakeSession{}, nil
	}}, SessionDeps{Config: cfg})
	if err != nil || rt != nil || built || len(h.closers) != 0 {
		t.Errorf("startSessions = %v, %v (built %v, %d closers); want nothing built", rt, err, built, len(h.closers))
	}
}

type closeRecorder struct {
	*fakeSession
	order *[]string
}

func (c closeRecorder) Close(ctx context.Context) error {
	*c.order = append(*c.order, "session")
	return c.fakeSession.Close(ctx)
}

// fakeContainers is an offline session remover.
type fakeContainers struct {
	err     error
	removed []rtsandbox.ChannelKey
}

func (f *fakeContainers) Remove(_ context.Context, ch rtsandbox.ChannelKey) error {
	f.removed = append(f.removed, ch)
	return f.err
}

func (f *fakeContainers) RemoveAll(context.Context) (int, error) { return 0, f.err }

// `rtsandbox channels off` removes the channel's session container through
// Sessions.Containers; without one it looks at nothing.
func TestRemoveSessionContainer(t *testing.T) {
	cfg := muxConfig(t, "")
	tests := []struct {
		name       string
		containers *fakeContainers // nil: no remover
		wantLooked bool
		wantErr    bool
	}{
		{"no-remover-looks-at-nothing", nil, false, false},
		{"removed", &fakeContainers{}, true, false},
		{"engine-error-named", &fakeContainers{err: errors.New("engine down")}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Sessions
			if tt.containers != nil {
				s.Containers = func(c *config.Config, engine *client.Client) (SessionContainers, error) {
					if c != cfg || engine == nil {
						t.Errorf("Containers(%p, %v); want the config and an engine client", c, engine)
					}
					return tt.containers, nil
				}
			}
			looked, err := RemoveSessionContainer(context.Background(), cfg, s, "discord:1")
			if looked != tt.wantLooked || (err != nil) != tt.wantErr {
				t.Errorf("RemoveSessionContainer = %v, %v; want %v, error %v", looked, err, tt.wantLooked, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "session container of discord:1") {
				t.Errorf("error %q does not name the channel", err)
			}
			if tt.containers != nil {
				if diff := cmp.Diff([]rtsandbox.ChannelKey{"discord:1"}, tt.containers.removed); diff != "" {
					t.Errorf("removed (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// Each session profile in use gets its own broker configuration: its
// model, only its tools (web tools included when listed) and MCP servers;
// sealed and unused profiles get none.
func TestSessionBrokers(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"models: {main: {url: 'https://api.anthropic.com', name: claude, api_key_env: AK, api: anthropic}}\n" +
		"tools: [{name: clock, builtin: clock}, {name: lookup, description: d, parameters: {type: object}, url: 'https://t/'}]\n" +
		"mcp: [{name: docs, url: 'https://mcp/', tools: [{name: search, description: d, parameters: {type: object}}]}, " +
		"{name: wiki, url: 'https://wiki/', tools: [{name: read, description: d, parameters: {type: object}}]}]\n" +
		"web: {fetch: {}}\n" +
		"profiles: {studio: {mode: session, model: main, mcp: [docs], tools: [clock, web_fetch]}, " +
		"plain: {mode: session, tools: [lookup]}, unused: {mode: session}, quiet: {mode: sealed}}\n" +
		"channels_profile: {'discord:1': studio, 'discord:2': quiet}\ndefault_profile: plain\n"))
	if err != nil {
		t.Fatal(err)
	}
	webFetch := broker.Tool{Spec: rtsandbox.ToolSpec{Name: config.WebFetchTool}}
	s := &services{web: &webTools{tools: []broker.Tool{webFetch}}, memory: testMemory(t)}
	got, err := sessionBrokers(context.Background(), cfg, func(string) string { return "" }, s, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Model      string
		Tools, MCP []string
	}
	views := map[string]view{}
	for name, bc := range got {
		v := view{Model: bc.Model}
		for _, tool := range bc.Tools {
			v.Tools = append(v.Tools, tool.Spec.Name)
		}
		for _, srv := range bc.MCP {
			v.MCP = append(v.MCP, srv.Name)
		}
		views[name] = v
	}
	// Every session profile has the memory tools, as every sealed worker
	// has them.
	memory := []string{wire.MemorySet, wire.MemoryGet, wire.MemoryRemove}
	want := map[string]view{
		"studio": {Model: "claude", Tools: append([]string{"clock", "web_fetch"}, memory...), MCP: []string{"docs"}},
		"plain":  {Model: "m", Tools: append([]string{"lookup"}, memory...)},
	}
	if diff := cmp.Diff(want, views); diff != "" {
		t.Errorf("session brokers (-want +got):\n%s", diff)
	}
	if _, err := broker.New(got["plain"]); err != nil {
		t.Errorf("broker.New(plain): %v", err)
	}
}

// An operator's tool named like a memory tool in a session profile is
// refused at startup, not at a channel's first turn.
func TestSessionBrokersMemoryToolNameReserved(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"tools: [{name: memory_get, description: d, parameters: {type: object}, url: 'https://t/'}]\n" +
		"profiles: {plain: {mode: session, tools: [memory_get]}}\ndefault_profile: plain\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &services{web: &webTools{}, memory: testMemory(t)}
	_, err = sessionBrokers(context.Background(), cfg, func(string) string { return "" }, s, nil, slog.New(slog.DiscardHandler))
	if !errors.Is(err, errMemoryToolName) || !strings.Contains(err.Error(), "profiles.plain") {
		t.Errorf("sessionBrokers = %v; want the reserved-name refusal naming the profile", err)
	}
}

// testMemory is a memory database under t.TempDir().
func testMemory(t *testing.T) *memstore.Store {
	t.Helper()
	m, err := memstore.Open(context.Background(), memstore.Options{Path: filepath.Join(t.TempDir(), "state", memstore.FileName)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// leftoverRemover records the channels whose session container it was
// asked to remove.
type leftoverRemover struct{ removed []rtsandbox.ChannelKey }

func (l *leftoverRemover) Remove(_ context.Context, ch rtsandbox.ChannelKey) error {
	l.removed = append(l.removed, ch)
	return nil
}

func (l *leftoverRemover) RemoveAll(context.Context) (int, error) { return 0, nil }

// A serve whose profiles no longer use session mode builds no session
// runtime, but off still removes the session container an earlier
// session profile left for the channel.
func TestMuxRemovesLeftoverWithoutSessionRuntime(t *testing.T) {
	m := newRuntimeMux(muxConfig(t, ""), &fakeruntime.Runtime{}, nil)
	l := &leftoverRemover{}
	m.leftovers = l
	if err := m.Remove(context.Background(), "discord:1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{"discord:1"}, l.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// Every broker of a host shares one decoding budget (broker.Intake), of
// half host.memory_limit_mb: the sealed runtime's, which each session
// profile's broker gets too, so the bodies of all channels together hold
// at most that (issue 21).
func TestBrokersShareOneDecodeIntake(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"host: {memory_limit_mb: 512}\n" +
		"profiles: {a: {mode: session}, b: {mode: session}}\nchannels_profile: {'discord:1': a}\ndefault_profile: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	in := decodeIntake(cfg)
	if got, want := in.Size(), int64(256<<20); got != want {
		t.Errorf("decoding budget = %d bytes; want %d, half of host.memory_limit_mb", got, want)
	}
	s := &services{web: &webTools{}, memory: testMemory(t), intake: in}
	got, err := sessionBrokers(context.Background(), cfg, func(string) string { return "" }, s, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d session brokers; want 2", len(got))
	}
	for name, bc := range got {
		if bc.Intake != in {
			t.Errorf("profile %s has its own decoding budget; want the host's one", name)
		}
	}
}
