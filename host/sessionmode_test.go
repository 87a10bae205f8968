package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// sessionConfigYAML sets every key of the session block away from its
// default.
const sessionConfigYAML = `state_dir: /var/lib/rtsandbox
model: {url: "https://api.example/v1/chat/completions", name: m, api_key_env: KEY}
profiles: {studio: {mode: session}}
default_profile: studio
session:
  max_calls: 9
  max_in_flight: 2
  max_connections: 5
  max_request_mb: 1
  max_response_mb: 3
  turn_timeout: 70s
  start_timeout: 7s
  limits: {memory_mb: 640, cpus: 0.5, pids: 80}
  party_dir: /srv/party
  container_prefix: rt0-x
  log_driver: journald
  log_options: {tag: w}
  compactor: {engine: summary, timeout: 30s, max_request_mb: 2, max_summary_tokens: 512, max_input_kb: 64}
  disk: {mode: soft, size_mb: 128, max_files: 900, prune_after_hours: 12}
`

func parseSessionConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(sessionConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Every value of the session block reaches the session runtime's options
// and the per-channel broker's configuration: none is parsed and dropped.
func TestSessionWiringAppliesConfig(t *testing.T) {
	cfg := parseSessionConfig(t)
	d := SessionDeps{Config: cfg, UID: 1000, GID: 1001, Installation: "iabc", TimeZone: "Europe/Berlin",
		Brokers: map[string]broker.Config{"studio": {}}}
	lim := container.SessionLimits{MemoryMB: 640, CPUs: 0.5, PIDs: 80}
	wantOpts := session.Options{
		Profiles: map[string]session.Profile{"studio": {Limits: lim, Runtime: container.RuntimeRunc}},
		PartyDir: "/srv/party", Image: "img:1", Installation: "iabc", ContainerPrefix: "rt0-x",
		UID: 1000, GID: 1001, TimeZone: "Europe/Berlin",
		Log:         container.LogConfig{Driver: "journald", Options: map[string]string{"tag": "w"}},
		TurnTimeout: 70 * time.Second, StartTimeout: 7 * time.Second, CompactorTimeout: 30 * time.Second,
		Disk: session.DiskOptions{Mode: session.DiskSoft, SizeMB: 128, MaxFiles: 900, PruneAfter: 12 * time.Hour},
	}
	if diff := cmp.Diff(wantOpts, sessionOptions(d, "img:1")); diff != "" {
		t.Errorf("session options (-want +got):\n%s", diff)
	}
	wantBroker := broker.SessionConfig{MaxCalls: 9, MaxInFlight: 2, MaxConnections: 5,
		MaxRequestBytes: 1 << 20, MaxResponseBytes: 3 << 20}
	if diff := cmp.Diff(wantBroker, sessionLimits(cfg.Session)); diff != "" {
		t.Errorf("broker limits (-want +got):\n%s", diff)
	}
}

// Each session profile's containers run under its runtime: its own, else
// sandbox.runtime.
func TestSessionWiringRuntime(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rtsandbox\nmodel: {url: \"https://api.example/v1/chat/completions\", name: m, api_key_env: KEY}\n" +
		"sandbox: {runtime: runsc}\nprofiles: {studio: {mode: session}, plain: {mode: session, runtime: runc}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := SessionDeps{Config: cfg, Brokers: map[string]broker.Config{"studio": {}, "plain": {}}}
	got := map[string]string{}
	for name, p := range sessionOptions(d, "i").Profiles {
		got[name] = p.Runtime
	}
	if diff := cmp.Diff(map[string]string{"studio": "runsc", "plain": "runc"}, got); diff != "" {
		t.Errorf("profile runtimes (-want +got):\n%s", diff)
	}
}

// The defaults of a file without a session block are the spec's: the
// broker gets exactly what 0 would give it.
func TestSessionWiringDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rtsandbox\nmodel: {url: \"https://api.example/v1/chat/completions\", name: m, api_key_env: KEY}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := broker.SessionConfig{MaxCalls: rtsandbox.SessionMaxCalls, MaxInFlight: rtsandbox.SessionMaxInFlight,
		MaxConnections: rtsandbox.SessionMaxConns, MaxRequestBytes: rtsandbox.MaxSessionRequest,
		MaxResponseBytes: rtsandbox.MaxStreamedAnswer}
	if diff := cmp.Diff(want, sessionLimits(cfg.Session)); diff != "" {
		t.Errorf("broker limits (-want +got):\n%s", diff)
	}
	if got := sessionOptions(SessionDeps{Config: cfg}, "i").ContainerPrefix; got != container.DefaultSessionPrefix {
		t.Errorf("container prefix = %q; want %q", got, container.DefaultSessionPrefix)
	}
}

// The session runtime's prompt memory block comes from the memory
// database the host opened: the speaker's own entries, private.
func TestSessionWiringMemoryBlock(t *testing.T) {
	m, err := memstore.Open(context.Background(), memstore.Options{Path: filepath.Join(t.TempDir(), "state", memstore.FileName)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := rtsandbox.Binding{Channel: "discord:1", Speaker: rtsandbox.Speaker{ID: "1", Name: "Ada", PrincipalID: "discord:1"}}
	c, err := wire.DecodeMemoryCall(wire.MemorySet, []byte(`{"scope":"speaker","key":"drink","text":"tea"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Call(context.Background(), b, c); err != nil {
		t.Fatal(err)
	}
	opts := sessionOptions(SessionDeps{Config: parseSessionConfig(t), Memory: m}, "i")
	if opts.Memory == nil {
		t.Fatal("no memory block function")
	}
	block, vis, err := opts.Memory(context.Background(), b)
	if err != nil || !strings.Contains(block, `"text":"tea"`) || vis != wire.MemoryPrivate {
		t.Errorf("block = %q, %q, %v; want ada's entry, private", block, vis, err)
	}
	if sessionOptions(SessionDeps{Config: parseSessionConfig(t)}, "i").Memory != nil {
		t.Error("a block function without a database")
	}
}

// recordingRemover records the names the offline remover removes.
type recordingRemover struct {
	removed []string
	reaped  []string
}

func (r *recordingRemover) Remove(_ context.Context, name string) error {
	r.removed = append(r.removed, name)
	return nil
}

func (r *recordingRemover) ReapSessions(_ context.Context, installation string) (int, error) {
	r.reaped = append(r.reaped, installation)
	return 0, nil
}

// session.container_prefix: `channels off` removes the channel's container
// by the name serve gives it, under the configured prefix, with the
// installation+channel hash; `reap` removes by label, whatever the prefix.
func TestOfflineSessionsUseContainerPrefix(t *testing.T) {
	cfg := parseSessionConfig(t)
	rec := &recordingRemover{}
	o := newOfflineSessions(cfg, rec)
	if err := o.Remove(context.Background(), "discord:123"); err != nil {
		t.Fatal(err)
	}
	inst := InstallationID(cfg)
	want := []string{container.PrefixedSessionName("rt0-x", inst, "discord:123")}
	if diff := cmp.Diff(want, rec.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(rec.removed[0], "rt0-x-discord_123-") {
		t.Errorf("name %q does not start with the configured prefix and the channel", rec.removed[0])
	}
	if _, err := o.RemoveAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{inst}, rec.reaped); diff != "" {
		t.Errorf("reaped (-want +got):\n%s", diff)
	}
}

// profiles.<name>.skills: the profile's tree reaches the session runtime
// (which copies it into run/skills) and its index and the mount point
// reach GET /worker/config; a profile without skills sends neither.
func TestSessionWiringSkills(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pdf"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pdf", "SKILL.md"), []byte("---\nname: pdf\ndescription: Read PDFs.\ntools: [clock]\n---\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := skilltree.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseSessionConfig(t)
	bc := broker.Config{ModelURL: upstream.MustParseEndpoint("https://api.example/v1", true), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "", nil }}
	b, err := broker.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	d := SessionDeps{Config: cfg, Brokers: map[string]broker.Config{"studio": bc, "plain": bc},
		Skills: map[string]*skilltree.Tree{"studio": tree}}
	if got := sessionOptions(d, "img:1").Profiles; got["studio"].Skills != tree || got["plain"].Skills != nil {
		t.Errorf("profiles %+v; want studio's tree and none for plain", got)
	}
	wc := workerConfig(d, cfg, b, bc, "studio")
	want := []wire.SessionSkill{{Name: "pdf", Description: "Read PDFs.", Tools: []string{"clock"}}}
	if diff := cmp.Diff(want, wc.Skills); diff != "" || wc.SkillsDir != wire.SessionSkillsDir {
		t.Errorf("worker config skills %q (-want +got):\n%s", wc.SkillsDir, diff)
	}
	if wc := workerConfig(d, cfg, b, bc, "plain"); wc.Skills != nil || wc.SkillsDir != "" {
		t.Errorf("plain's worker config has skills %q %v", wc.SkillsDir, wc.Skills)
	}
}

// model.context_window and reserve_tokens (and a models: entry's) reach
// GET /worker/config of the profiles on that model; a model without them
// sends neither, and the worker keeps its defaults.
func TestSessionWiringModelWindow(t *testing.T) {
	cfg, err := config.Parse([]byte(`state_dir: /var/lib/rtsandbox
model: {url: "https://api.example/v1/chat/completions", name: m, api_key_env: KEY, context_window: 8192, reserve_tokens: 1000}
models: {big: {url: "https://api.example/v1/chat/completions", name: b, api_key_env: KEY, context_window: 1000000}, plain: {url: "https://api.example/v1/chat/completions", name: p, api_key_env: KEY}}
profiles: {small: {mode: session}, large: {mode: session, model: big}, bare: {mode: session, model: plain}}
default_profile: small
`))
	if err != nil {
		t.Fatal(err)
	}
	bc := broker.Config{ModelURL: upstream.MustParseEndpoint("https://api.example/v1", true), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "", nil }}
	b, err := broker.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	d := SessionDeps{Config: cfg}
	type window struct{ Window, Reserve int }
	tests := []struct {
		profile string
		want    window
	}{
		{"small", window{8192, 1000}},
		{"large", window{1000000, 0}},
		{"bare", window{}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			wc := workerConfig(d, cfg, b, bc, tt.profile)
			if diff := cmp.Diff(tt.want, window{wc.ContextWindow, wc.ReserveTokens}); diff != "" {
				t.Errorf("worker config window (-want +got):\n%s", diff)
			}
		})
	}
}
