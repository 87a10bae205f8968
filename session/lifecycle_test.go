package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/effort"
	"github.com/rtsandbox/rtsandbox/wire"
)

// count returns how many of calls equal call.
func count(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

// The reference's test ".channel-key created with O_EXCL|O_NOFOLLOW": a link planted at
// the record, even to a file holding the right key, is refused and never
// followed or written through; so is a FIFO (without blocking) and a
// record naming another key.
func TestSecChannelKeyRecord(t *testing.T) {
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, record, outside string)
	}{
		{"symlink to the right key", func(t *testing.T, record, outside string) {
			if err := os.Symlink(outside, record); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, record, _ string) {
			if err := syscall.Mkfifo(record, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"another key", func(t *testing.T, record, _ string) {
			if err := os.WriteFile(record, []byte("discord:other"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			outside := filepath.Join(shortDir(t), "key")
			if err := os.WriteFile(outside, []byte("discord:k"), 0o600); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(f.party, "discord_k")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, filepath.Join(root, keyFile), outside)
			if _, err := f.rt.SessionsDir("discord:k"); !errors.Is(err, ErrAlias) {
				t.Errorf("SessionsDir = %v; want ErrAlias", err)
			}
			if data, _ := os.ReadFile(outside); string(data) != "discord:k" {
				t.Errorf("outside file = %q", data)
			}
		})
	}
	t.Run("created exclusively with the exact key", func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.rt.SessionsDir("discord:k/x y"); err != nil {
			t.Fatal(err)
		}
		record := filepath.Join(f.party, Segment("discord:k/x y"), keyFile)
		fi, err := os.Lstat(record)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Fatalf("record = %v, %v; want a 0600 file", fi, err)
		}
		if data, _ := os.ReadFile(record); string(data) != "discord:k/x y" {
			t.Errorf("record = %q", data)
		}
		if _, err := f.rt.SessionsDir("discord:k/x y"); err != nil {
			t.Errorf("second check of the same key = %v", err)
		}
	})
}

// docs/session.md, "Directories and defences": a channel root that is a link is refused.
func TestSecChannelRootSymlink(t *testing.T) {
	f := newFixture(t)
	outside := shortDir(t)
	if err := os.Symlink(outside, filepath.Join(f.party, "discord_r")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.SessionsDir("discord:r"); !errors.Is(err, ErrRootSymlink) {
		t.Errorf("SessionsDir = %v; want ErrRootSymlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote %v outside", entries)
	}
}

// docs/session.md, "Session runtime" "Directories": run/ or workspace/ replaced by a link fails the
// start with "Channel directory symlinks refused".
func TestSecRunDirSymlinkRefused(t *testing.T) {
	f := newFixture(t)
	root, err := f.rt.s.channelRoot("discord:s")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shortDir(t), filepath.Join(root, "run")); err != nil {
		t.Fatal(err)
	}
	_, err = f.turnIn(context.Background(), "discord:s", "a")
	if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), "Channel directory symlinks refused") {
		t.Errorf("turn = %v; want the symlink refusal", err)
	}
	if n := count(f.w.takeCalls(), "ensure"); n != 0 {
		t.Errorf("%d containers ensured on a refused directory", n)
	}
}

// The reference's test "socket path > 100 → refused". Segments are at most 28 bytes
// (Segment), so only a party directory longer than config allows
// (config.MaxPartyDirLen) can pass the bound; every key fits under one
// that config accepts (TestSocketPathLongKeyFits).
func TestSocketPathTooLong(t *testing.T) {
	base := shortDir(t)
	party := filepath.Join(base, strings.Repeat("p", 70-len(base)-1)) // 70 bytes
	f := newFixture(t, func(o *Options) { o.PartyDir = party })
	channel := "discord:" + strings.Repeat("9", 100-len(f.party)-len("/discord_/run/broker.sock")+1)
	_, err := f.turnIn(context.Background(), channel, "a")
	if !errors.Is(err, rtsandbox.ErrSocketPath) || !strings.Contains(err.Error(), "Broker socket path too long") {
		t.Errorf("turn = %v; want rtsandbox.ErrSocketPath", err)
	}
	if len(f.w.brokers) != 0 {
		t.Errorf("%d brokers made", len(f.w.brokers))
	}
	// One character less fits.
	channel = channel[:len(channel)-1]
	if _, err := f.turnIn(context.Background(), channel, "a"); err != nil {
		t.Errorf("turn with a 100-byte socket path = %v", err)
	}
}

// Every valid key, up to the 256 bytes a key may have, fits the socket
// path bound under a party directory of config's longest
// (config.MaxPartyDirLen, 55 bytes): before issue 21 a long HTTP key's
// lossy segment passed it and the channel never started.
func TestSocketPathLongKeyFits(t *testing.T) {
	base := shortDir(t)
	party := filepath.Join(base, strings.Repeat("p", 55-len(base)-1))
	f := newFixture(t, func(o *Options) { o.PartyDir = party })
	channel := "http:" + strings.Repeat("x", rtsandbox.MaxChannelKey-len("http:"))
	if _, err := f.turnIn(context.Background(), channel, "a"); err != nil {
		t.Errorf("turn of a 256-byte key = %v", err)
	}
}

// The reference's test "partyDir permission and ownership refusal".
func TestPartyDirRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string
	}{
		{"group bits", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "p")
			if err := os.Mkdir(p, 0o750); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"other bits", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "p")
			if err := os.Mkdir(p, 0o705); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"relative", func(*testing.T, string) string { return "party" }},
		{"root", func(*testing.T, string) string { return "/" }},
		{"a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "p")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			name  string
			setup func(t *testing.T, dir string) string
		}{"another owner", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "p")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
			return p
		}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(shortDir(t), newWorld(), &logSink{})
			o.PartyDir = tt.setup(t, filepath.Dir(o.PartyDir))
			if _, err := New(o); !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("New = %v; want a setup refusal", err)
			}
		})
	}
	t.Run("created private when missing", func(t *testing.T) {
		o := testOptions(shortDir(t), newWorld(), &logSink{})
		rt, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		if fi, err := os.Lstat(o.PartyDir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("party dir = %v, %v", fi, err)
		}
	})
}

// The reference's test "non-root refusal", adapted: the host may run as root only with a
// non-root worker user; a non-root host runs workers as itself.
func TestNonRootRefusal(t *testing.T) {
	tests := []struct {
		name             string
		euid, egid       int
		uid, gid         int
		wantErr          bool
		wantUID, wantGID int
		wantRoot         bool
	}{
		{"root host without a worker user", 0, 0, 0, 0, true, 0, 0, false},
		{"root host, root group", 0, 0, 1000, 0, true, 0, 0, false},
		{"root host with a worker user", 0, 0, 1000, 1000, false, 1000, 1000, true},
		{"user host defaults to itself", 1000, 100, 0, 0, false, 1000, 100, false},
		{"user host names itself", 1000, 100, 1000, 100, false, 1000, 100, false},
		{"user host names another", 1000, 100, 1001, 100, true, 0, 0, false},
		{"negative", 1000, 100, -1, 100, true, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settings{Options: Options{UID: tt.uid, GID: tt.gid}}
			err := s.checkUser(tt.euid, tt.egid)
			if (err != nil) != tt.wantErr {
				t.Fatalf("checkUser = %v; want error %v", err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Errorf("error %v is not ErrInvalid", err)
				}
				return
			}
			if s.UID != tt.wantUID || s.GID != tt.wantGID || s.hostRoot != tt.wantRoot {
				t.Errorf("user %d:%d root %v; want %d:%d %v", s.UID, s.GID, s.hostRoot, tt.wantUID, tt.wantGID, tt.wantRoot)
			}
		})
	}
}

// The reference's test "containerPrefix and deadline validation": the installation id
// (which names and labels containers), the deadlines and every other
// setup refusal; the container prefix's own refusal is
// TestContainerPrefixRefused.
func TestSetupRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Options)
	}{
		{"no driver", func(o *Options) { o.Driver = nil }},
		{"no broker factory", func(o *Options) { o.NewBroker = nil }},
		{"no profiles", func(o *Options) { o.Profiles = nil }},
		{"no profile function", func(o *Options) { o.ProfileFor = nil }},
		{"bad installation", func(o *Options) { o.Installation = "-Bad" }},
		{"turn timeout too short", func(o *Options) { o.TurnTimeout = 500 * time.Millisecond }},
		{"turn timeout too long", func(o *Options) { o.TurnTimeout = 2 * time.Hour }},
		{"negative turn timeout", func(o *Options) { o.TurnTimeout = -time.Second }},
		{"start timeout too short", func(o *Options) { o.StartTimeout = time.Millisecond }},
		{"start timeout too long", func(o *Options) { o.StartTimeout = time.Hour }},
		// docs/protocol.md, "Compaction" "The compactor's timeout must leave half the turn".
		{"compactor timeout over half the turn", func(o *Options) {
			o.TurnTimeout, o.CompactorTimeout = 10*time.Second, 5*time.Second+time.Millisecond
		}},
		{"negative compactor timeout", func(o *Options) { o.CompactorTimeout = -time.Second }},
		{"profile name", func(o *Options) { o.Profiles = map[string]Profile{"bad name": {}} }},
		{"image flag", func(o *Options) { o.Image = "-x" }},
		{"no image", func(o *Options) { o.Image = "" }},
		{"profile image", func(o *Options) { o.Profiles = map[string]Profile{"p": {Image: "a b"}} }},
		{"limits", func(o *Options) {
			o.Profiles = map[string]Profile{"p": {Limits: container.SessionLimits{MemoryMB: 1, CPUs: 1, PIDs: 8}}}
		}},
		{"log driver", func(o *Options) { o.Log = container.LogConfig{Driver: "-bad"} }},
		{"log option", func(o *Options) {
			o.Log = container.LogConfig{Driver: "local", Options: map[string]string{"max-size": "1\n"}}
		}},
		{"time zone", func(o *Options) { o.TimeZone = "Mars/Olympus" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(shortDir(t), newWorld(), &logSink{})
			tt.edit(&o)
			if rt, err := New(o); !errors.Is(err, rtsandbox.ErrInvalid) {
				if rt != nil {
					rt.Close(context.Background())
				}
				t.Errorf("New = %v; want a setup refusal", err)
			}
		})
	}
}

// The reference's test "Profile change → remove and recreate, with a new broker".
func TestProfileChangeRecreates(t *testing.T) {
	profile := "studio"
	var mu sync.Mutex
	f := newFixture(t, func(o *Options) {
		o.ProfileFor = func(rtsandbox.ChannelKey) string { mu.Lock(); defer mu.Unlock(); return profile }
	})
	if _, err := f.turnIn(context.Background(), "discord:p", "a"); err != nil {
		t.Fatal(err)
	}
	f.w.takeCalls()
	mu.Lock()
	profile = "other"
	mu.Unlock()
	if _, err := f.turnIn(context.Background(), "discord:p", "b"); err != nil {
		t.Fatal(err)
	}
	name := f.rt.name("discord:p")
	if diff := cmp.Diff([]string{"status", "remove:" + name, "ensure", "create"}, f.w.takeCalls()); diff != "" {
		t.Errorf("driver calls (-want +got):\n%s", diff)
	}
	if len(f.w.brokers) != 2 || !f.w.brokers[0].closed || f.w.brokers[1].profile != "other" {
		t.Errorf("brokers = %+v; want the first closed and a second for other", f.w.brokers)
	}
	if got := f.w.created[1].Profile; got != "other" {
		t.Errorf("recreated with profile %q", got)
	}
}

// The reference's test "image change → remove and recreate, with a new broker", and a
// dead container (docs/session.md, "Session runtime" "A dead container recreates both").
func TestStaleContainerRecreates(t *testing.T) {
	for _, tt := range []struct {
		name  string
		stale func(w *world, name string)
	}{
		{"image changed", func(w *world, name string) {
			s := w.running[name]
			s.Image = "sandbox:old"
			w.running[name] = s
		}},
		{"dead", func(w *world, name string) {
			w.stopped[name] = w.running[name]
			delete(w.running, name)
		}},
		{"spec changed", func(w *world, name string) {
			s := w.running[name]
			s.Limits.PIDs = 64
			w.running[name] = s
		}},
		// The channel's profile moved from runsc to runc (or back): its
		// next turn gets a container of the new runtime.
		{"runtime changed", func(w *world, name string) {
			s := w.running[name]
			s.Runtime = container.RuntimeRunsc
			w.running[name] = s
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if _, err := f.turnIn(context.Background(), "discord:i", "a"); err != nil {
				t.Fatal(err)
			}
			name := f.rt.name("discord:i")
			handled := f.faultHandled()
			f.w.mu.Lock()
			tt.stale(f.w, name)
			f.w.faultLocked(name, "destroy") // replaced or dead behind the runtime's back: its watch hears it
			f.w.mu.Unlock()
			<-handled
			f.w.takeCalls()
			if _, err := f.turnIn(context.Background(), "discord:i", "b"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"status", "remove:" + name, "ensure", "create"}, f.w.takeCalls()); diff != "" {
				t.Errorf("driver calls (-want +got):\n%s", diff)
			}
			if len(f.w.brokers) != 2 || !f.w.brokers[0].closed {
				t.Errorf("%d brokers; want a new one and the old closed", len(f.w.brokers))
			}
			if got := f.w.running[name].Image; got != testImage {
				t.Errorf("image %q after recreate", got)
			}
		})
	}
}

// docs/session.md, "Session runtime" "The same running container with a new broker (for example after
// a host restart) keeps the container": Close leaves it running, and a
// new runtime on the same party dir makes a new broker on the same socket
// path, which the running worker announces itself to.
func TestHostRestartKeepsContainer(t *testing.T) {
	f := newFixture(t)
	if _, err := f.turnIn(context.Background(), "discord:h", "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := removals(f.w.takeCalls()); len(r) != 0 {
		t.Errorf("Close removed %v; containers must keep running", r)
	}
	if !f.w.brokers[0].closed {
		t.Error("Close left the broker open")
	}
	if _, err := f.turnIn(context.Background(), "discord:h", "b"); !errors.Is(err, rtsandbox.ErrRuntimeClosed) {
		t.Errorf("turn after Close = %v; want rtsandbox.ErrRuntimeClosed", err)
	}
	rt2, err := New(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(context.Background())
	res, err := rt2.Turn(context.Background(), TurnRequest{Binding: binding("discord:h", "b"), Text: "again"})
	if err != nil || res.Text != "done" {
		t.Fatalf("turn after restart = %+v, %v", res, err)
	}
	if len(f.w.created) != 1 {
		t.Errorf("%d containers created; the running one must be kept", len(f.w.created))
	}
	if len(f.w.brokers) != 2 || f.w.brokers[1].socket != f.w.brokers[0].socket {
		t.Errorf("brokers %+v; want a second on the same socket path", f.w.brokers)
	}
}

// The reference's test "unknown profile".
func TestUnknownProfile(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.ProfileFor = func(rtsandbox.ChannelKey) string { return "nope" } })
	_, err := f.turnIn(context.Background(), "discord:u", "a")
	if !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), "Unknown profile") {
		t.Errorf("turn = %v; want ErrUnknownProfile", err)
	}
	if n := len(f.w.takeCalls()); n != 0 {
		t.Errorf("%d driver calls for an unknown profile", n)
	}
}

// The reference's test "missing MCP server", adapted: the broker factory resolves the
// profile's MCP servers (the host's broker.Session config) and its
// refusal fails the start before any container is touched.
func TestMissingMCPServer(t *testing.T) {
	f := newFixture(t)
	f.w.brokerErr = errors.New("MCP server docs unavailable")
	_, err := f.turnIn(context.Background(), "discord:m", "a")
	if err == nil || !strings.Contains(err.Error(), "MCP server docs unavailable") {
		t.Errorf("turn = %v; want the factory's refusal", err)
	}
	if n := count(f.w.takeCalls(), "ensure"); n != 0 {
		t.Errorf("%d containers ensured without a broker", n)
	}
}

// The reference's test "start deduplication": a second start while one is in flight
// waits for it and reuses its container and broker.
func TestStartDeduplicated(t *testing.T) {
	f := newFixture(t)
	gate := make(chan struct{})
	entered := make(chan struct{}, 2)
	f.w.ensureGate = gate
	f.w.onEnsure = func() { entered <- struct{}{} }
	errs := make(chan error, 2)
	go func() { errs <- f.rt.start(context.Background(), "discord:d", "studio") }()
	<-entered // the first start is inside the engine
	go func() { errs <- f.rt.start(context.Background(), "discord:d", "studio") }()
	// The second start waits; give it a moment to reach the wait.
	time.Sleep(20 * time.Millisecond)
	close(gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := count(f.w.takeCalls(), "ensure"); n != 1 {
		t.Errorf("%d EnsureRunning calls; want 1", n)
	}
	if len(f.w.brokers) != 1 {
		t.Errorf("%d brokers; want 1", len(f.w.brokers))
	}
}

// The reference's test ""Channel is busy"": a second turn in a channel with a running
// turn is refused at once; other channels run.
func TestChannelBusy(t *testing.T) {
	f := newFixture(t)
	delivered := make(chan struct{})
	finish := make(chan struct{})
	f.w.worker = func(ctx context.Context, st wire.SessionTurn) (wire.SessionResult, error) {
		if st.TurnID == "first" {
			close(delivered)
			<-finish
		}
		return wire.SessionResult{OK: true, Text: "done", Files: []wire.ReplyFile{}}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.rt.Turn(context.Background(), TurnRequest{Binding: binding("discord:b", "a"), Text: "x", TurnID: "first"})
		done <- err
	}()
	<-delivered
	_, err := f.turnIn(context.Background(), "discord:b", "second")
	if !errors.Is(err, rtsandbox.ErrChannelBusy) || !errors.Is(err, rtsandbox.ErrBusy) || !strings.Contains(err.Error(), "Channel is busy") {
		t.Errorf("second turn = %v; want Channel is busy", err)
	}
	if _, err := f.turnIn(context.Background(), "discord:other", "c"); err != nil {
		t.Errorf("another channel's turn = %v", err)
	}
	if st, err := f.rt.Inspect(context.Background(), "discord:b"); err != nil || !st.Busy {
		t.Errorf("Status = %+v, %v; want busy", st, err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := f.turnIn(context.Background(), "discord:b", "third"); err != nil {
		t.Errorf("turn after the first ended = %v", err)
	}
}

// The reference's test "memory > 100k refused" (100,000 UTF-16 units pass).
func TestMemoryTooLarge(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want error
	}{{100000, nil}, {100001, ErrMemoryTooLarge}} {
		f := newFixture(t, func(o *Options) {
			o.Memory = func(context.Context, rtsandbox.Binding) (string, string, error) {
				return strings.Repeat("m", tt.n), "", nil
			}
		})
		_, err := f.turnIn(context.Background(), "discord:mem", "a")
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("memory of %d: turn = %v; want %v", tt.n, err, tt.want)
		}
		if tt.want != nil && len(f.w.deliveredTurns()) != 0 {
			t.Error("turn delivered with oversized memory")
		}
	}
}

// The reference's test "invalid turnId (.., a/b, 256 chars)" and the other docs/protocol.md, "The session protocol" input
// rules: refused before anything starts.
func TestInvalidTurnInput(t *testing.T) {
	long := strings.Repeat("x", 257)
	tests := []struct {
		name string
		req  TurnRequest
	}{
		{"turn id ..", TurnRequest{TurnID: ".."}},
		{"turn id a/b", TurnRequest{TurnID: "a/b"}},
		{"turn id 256 chars", TurnRequest{TurnID: strings.Repeat("t", 256)}},
		{"turn id backslash", TurnRequest{TurnID: `a\b`}},
		{"text over 100,000", TurnRequest{TurnID: "t", Text: strings.Repeat("a", 100001)}},
		{"author name over 256", TurnRequest{TurnID: "t", Binding: rtsandbox.Binding{Speaker: rtsandbox.Speaker{ID: "a", Name: long}}}},
		{"author id over 256", TurnRequest{TurnID: "t", Binding: rtsandbox.Binding{Speaker: rtsandbox.Speaker{ID: long}}}},
		{"bad image", TurnRequest{TurnID: "t", Images: []wire.Image{{Data: "AQID", MIMEType: "image/svg+xml"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.req.Binding.Channel = "discord:in"
			_, err := f.rt.Turn(context.Background(), tt.req)
			if !errors.Is(err, rtsandbox.ErrInvalid) || !strings.HasPrefix(err.Error(), "Sandbox turn failed: ") {
				t.Errorf("turn = %v; want an input refusal", err)
			}
			if calls := f.w.takeCalls(); len(calls) != 0 {
				t.Errorf("driver calls %v for invalid input", calls)
			}
		})
	}
	t.Run("turn id 255 chars", func(t *testing.T) {
		f := newFixture(t)
		req := TurnRequest{Binding: binding("discord:in", "a"), TurnID: strings.Repeat("t", 255)}
		if _, err := f.rt.Turn(context.Background(), req); err != nil {
			t.Errorf("turn = %v", err)
		}
	})
	t.Run("channel key", func(t *testing.T) {
		f := newFixture(t)
		for _, ch := range []string{"nokind", "discord:" + strings.Repeat("1", 250)} {
			if _, err := f.turnIn(context.Background(), ch, "a"); !errors.Is(err, rtsandbox.ErrChannelKey) {
				t.Errorf("channel %.20q: turn = %v; want rtsandbox.ErrChannelKey", ch, err)
			}
		}
	})
}

// docs/session.md, "Session runtime" "Readiness": a worker that never announces itself fails the start
// with "Worker did not become ready" after the start timeout.
func TestWorkerNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *Options) { o.StartTimeout = time.Second; o.TurnTimeout = time.Minute })
		f.rt.s.Driver = notReadyDriver{f.w}
		start := time.Now()
		_, err := f.turnIn(context.Background(), "discord:nr", "a")
		if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "Worker did not become ready") {
			t.Errorf("turn = %v; want ErrNotReady", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("gave up after %v; want the 1 s start timeout", d)
		}
	})
}

// notReadyDriver runs nothing: its containers never announce themselves.
type notReadyDriver struct{ *world }

func (notReadyDriver) EnsureRunning(context.Context, container.SessionSpec) error { return nil }

// Stop aborts the running turn, whose container is then removed; Stop
// without a turn reports false and removes nothing.
func TestStopAbortsTurn(t *testing.T) {
	f := newFixture(t)
	if f.rt.Stop("discord:s") {
		t.Error("Stop without a turn = true")
	}
	done := f.hangingTurn("discord:s")
	if !f.rt.Stop("discord:s") {
		t.Error("Stop with a turn = false")
	}
	err := <-done
	if !errors.Is(err, rtsandbox.ErrTurnStopped) || !errors.Is(err, rtsandbox.ErrEndedEarly) {
		t.Errorf("stopped turn = %v; want rtsandbox.ErrTurnStopped", err)
	}
	if diff := cmp.Diff([]string{f.rt.name("discord:s")}, removals(f.w.takeCalls())); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// A turn aborted while the engine creates its container (the owner's
// stop, the deadline, the caller gone) removes the container exactly once,
// after the create returned: the engine finishes a create whose caller
// went away, so a removal run before it finished found nothing and left
// the container behind (TestSessionServeStopDuringStart, under load).
// synctest.Wait makes the order certain: the create is released only once
// every goroutine of the turn is blocked.
func TestAbortDuringCreateRemovesAfterCreate(t *testing.T) {
	tests := []struct {
		name  string
		abort func(t *testing.T, f *fixture, cancelCaller context.CancelFunc)
		want  error
	}{
		{"stop", func(t *testing.T, f *fixture, _ context.CancelFunc) {
			if !f.rt.Stop("discord:cr") {
				t.Error("Stop with a turn = false")
			}
		}, rtsandbox.ErrTurnStopped},
		{"deadline", func(*testing.T, *fixture, context.CancelFunc) { time.Sleep(10 * time.Second) }, rtsandbox.ErrTurnTimeout},
		{"caller cancelled", func(_ *testing.T, _ *fixture, cancel context.CancelFunc) { cancel() }, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, func(o *Options) { o.TurnTimeout = 10 * time.Second })
				gate, entered := make(chan struct{}), make(chan struct{})
				f.w.ensureGate = gate
				f.w.onEnsure = func() { close(entered) }
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { _, err := f.turnIn(ctx, "discord:cr", "a"); done <- err }()
				<-entered
				tt.abort(t, f, cancel)
				synctest.Wait() // the turn waits for the create, or (the bug) has removed and ended
				close(gate)
				err := <-done
				f.w.late.Wait()
				if !errors.Is(err, tt.want) {
					t.Errorf("turn = %v; want %v", err, tt.want)
				}
				name := f.rt.name("discord:cr")
				want := []string{"status", "ensure", "create", "logs:200", "remove:" + name}
				if diff := cmp.Diff(want, f.w.takeCalls()); diff != "" {
					t.Errorf("driver calls (-want +got):\n%s", diff)
				}
				if st, _ := f.w.Status(context.Background(), name); st.State != container.StateMissing {
					t.Errorf("container after the aborted turn: %+v; want none", st)
				}
			})
		})
	}
}

// Remove (the reference's stop: owner off, channels off) stops a running
// turn, removes the container and closes the broker; the next turn
// starts a new container and broker.
func TestRemove(t *testing.T) {
	f := newFixture(t)
	if _, err := f.turnIn(context.Background(), "discord:r", "a"); err != nil {
		t.Fatal(err)
	}
	f.w.takeCalls()
	if err := f.rt.Remove(context.Background(), "discord:r"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"remove:" + f.rt.name("discord:r")}, f.w.takeCalls()); diff != "" {
		t.Errorf("driver calls (-want +got):\n%s", diff)
	}
	if !f.w.brokers[0].closed {
		t.Error("Remove left the broker open")
	}
	st, err := f.rt.Inspect(context.Background(), "discord:r")
	if err != nil || st.Container != container.StateMissing || st.Ready {
		t.Errorf("Status after Remove = %+v, %v", st, err)
	}
	if _, err := f.turnIn(context.Background(), "discord:r", "b"); err != nil {
		t.Fatal(err)
	}
	if len(f.w.created) != 2 || len(f.w.brokers) != 2 {
		t.Errorf("%d containers, %d brokers; want 2 and 2", len(f.w.created), len(f.w.brokers))
	}
}

// Close aborts running turns with rtsandbox.ErrRuntimeClosed (their containers are
// removed, as every aborted turn's) and waits for them.
func TestCloseAbortsRunningTurn(t *testing.T) {
	f := newFixture(t)
	done := f.hangingTurn("discord:c")
	if err := f.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.rt.mu.Lock()
	active := f.rt.chans["discord:c"].active
	f.rt.mu.Unlock()
	if active != nil {
		t.Error("Close returned before the turn ended")
	}
	if err := <-done; !errors.Is(err, rtsandbox.ErrRuntimeClosed) {
		t.Errorf("turn = %v; want rtsandbox.ErrRuntimeClosed", err)
	}
}

// docs/architecture.md, "The request path": the binding is released and the channel freed after
// every turn, failed ones included (the fake broker refuses a second
// Bind while one is current).
func TestReleaseAfterFailure(t *testing.T) {
	f := newFixture(t)
	fail := true
	f.w.worker = func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
		if fail {
			fail = false
			return wire.SessionResult{Error: "boom"}, nil
		}
		return wire.SessionResult{OK: true, Text: "done"}, nil
	}
	if _, err := f.turnIn(context.Background(), "discord:rel", "a"); !errors.Is(err, ErrWorkerFailed) {
		t.Fatalf("first turn = %v", err)
	}
	if _, err := f.turnIn(context.Background(), "discord:rel", "b"); err != nil {
		t.Errorf("second turn = %v; the binding was not released", err)
	}
}

// docs/session.md, "Effort judge": the judge sees the level it judged for the channel's
// previous turn; the level rides in the turn and the binding; a level the
// broker does not know fails the turn.
func TestJudgedLevel(t *testing.T) {
	var previous []string
	answers := []string{effort.Medium, effort.XHigh, "max"}
	f := newFixture(t, func(o *Options) {
		o.Judge = effort.JudgeFunc(func(_ context.Context, _, prev string) (string, error) {
			previous = append(previous, prev)
			a := answers[0]
			answers = answers[1:]
			return a, nil
		})
	})
	for _, id := range []string{"a", "b"} {
		if _, err := f.turnIn(context.Background(), "discord:j", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.turnIn(context.Background(), "discord:j", "c"); err == nil {
		t.Error("a judged level of max ran")
	}
	if diff := cmp.Diff([]string{"", effort.Medium, effort.XHigh}, previous); diff != "" {
		t.Errorf("previous levels (-want +got):\n%s", diff)
	}
	var got []string
	for _, d := range f.w.deliveredTurns() {
		got = append(got, d.Thinking)
	}
	if diff := cmp.Diff([]string{effort.Medium, effort.XHigh}, got); diff != "" {
		t.Errorf("delivered levels (-want +got):\n%s", diff)
	}
}

// RunTurn is the router's shape: the text of a successful turn.
func TestRunTurn(t *testing.T) {
	f := newFixture(t)
	reply, err := f.rt.RunTurn(context.Background(), binding("discord:rt", "a"), "hello")
	if err != nil || reply != (rtsandbox.Reply{OK: true, Text: "done"}) {
		t.Errorf("RunTurn = %+v, %v", reply, err)
	}
}

// Status reports mode, profile and the container state.
func TestStatus(t *testing.T) {
	f := newFixture(t)
	st, err := f.rt.Inspect(context.Background(), "discord:st")
	want := Status{Mode: "session", Profile: "studio", Container: container.StateMissing}
	if err != nil || st != want {
		t.Errorf("Status before a turn = %+v, %v; want %+v", st, err, want)
	}
	if _, err := f.turnIn(context.Background(), "discord:st", "a"); err != nil {
		t.Fatal(err)
	}
	st, err = f.rt.Inspect(context.Background(), "discord:st")
	want = Status{Mode: "session", Profile: "studio", Container: container.StateRunning, Image: testImage, ContainerProfile: "studio", Ready: true}
	if err != nil || st != want {
		t.Errorf("Status after a turn = %+v, %v; want %+v", st, err, want)
	}
}

// When the host runs as root, the worker user gets run/, workspace/, the
// owned directories and the socket, and the channel root stays the
// host's.
func TestHostRootHandsOver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := newFixture(t)
	if _, err := f.turnIn(context.Background(), "discord:own", "a"); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(f.party, "discord_own")
	for _, p := range []string{"run", "run/broker.sock", "workspace", "workspace/sessions", "workspace/attachments", "workspace/outbox"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s owned by %d:%d; want 1000:1000", p, st.Uid, st.Gid)
		}
	}
	fi, _ := os.Lstat(root)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o700 {
		t.Errorf("channel root owned by %d mode %v; want the host's, 0700", st.Uid, fi.Mode().Perm())
	}
}
