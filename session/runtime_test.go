package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reference's test "sessionsDir("discord:123") equals <root>/<channelSegment>/workspace/sessions"
func TestSessionsDir(t *testing.T) {
	f := newFixture(t)
	got, err := f.rt.SessionsDir("discord:123")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(f.party, "discord_123", "workspace", "sessions"); got != want {
		t.Errorf("SessionsDir = %q; want %q", got, want)
	}
}

// The reference's test "Two turns (a, b)": each ok with text done and art.png [1,2,3];
// the worker saw the author, memory discord:123:<id> and thinking high; a
// pre-existing existing.jsonl is untouched. One container serves both.
func TestTwoTurns(t *testing.T) {
	f := newFixture(t)
	sessions, err := f.rt.SessionsDir("discord:123")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(sessions, "existing.jsonl")
	if err := os.WriteFile(existing, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		res, err := f.turnIn(context.Background(), "discord:123", id)
		if err != nil {
			t.Fatalf("turn %s: %v", id, err)
		}
		want := TurnResult{TurnID: id, Text: "done", Files: []File{{Name: "art.png", Data: []byte{1, 2, 3}}}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("turn %s (-want +got):\n%s", id, diff)
		}
	}
	var seen []wire.SessionTurn
	for _, d := range f.w.deliveredTurns() {
		seen = append(seen, wire.SessionTurn{Author: d.Author, Memory: d.Memory, Thinking: d.Thinking})
	}
	want := []wire.SessionTurn{
		{Author: wire.SessionAuthor{ID: "a", Name: "Guest a"}, Memory: "discord:123:a", Thinking: "high"},
		{Author: wire.SessionAuthor{ID: "b", Name: "Guest b"}, Memory: "discord:123:b", Thinking: "high"},
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("worker saw (-want +got):\n%s", diff)
	}
	if data, err := os.ReadFile(existing); err != nil || string(data) != "{}\n" {
		t.Errorf("existing.jsonl = %q, %v", data, err)
	}
	if n := len(f.w.created); n != 1 {
		t.Errorf("%d containers created for two turns; want 1", n)
	}
}

// The reference's test "Memory visibility": unset → the worker sees private; shared →
// shared. The host now says the visibility with each block (Options.Memory):
// a block without one is private, an empty block has none, and a
// visibility that is neither fails the turn before it is delivered (it was
// a setup refusal while the visibility was an option).
func TestMemoryVisibility(t *testing.T) {
	for _, tt := range []struct {
		name, block, set string
		want             string
		refused          bool
	}{
		{"unset", "party-wide facts", "", "private", false},
		{"shared", "party-wide facts", "shared", "shared", false},
		{"private", "party-wide facts", "private", "private", false},
		{"empty-block", "", "private", "", false},
		{"public", "party-wide facts", "public", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(o *Options) {
				o.Memory = func(context.Context, rtsandbox.Binding) (string, string, error) {
					return tt.block, tt.set, nil
				}
			})
			_, err := f.turnIn(context.Background(), "discord:123", "a")
			d := f.w.deliveredTurns()
			if tt.refused {
				if !errors.Is(err, wire.ErrTurnInput) || len(d) != 0 {
					t.Errorf("turn = %v, delivered %d; want ErrTurnInput and nothing delivered", err, len(d))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d) != 1 || d[0].MemoryVisibility != tt.want || d[0].Memory != tt.block {
				t.Errorf("delivered = %+v; want memory %q with visibility %q", d, tt.block, tt.want)
			}
		})
	}
}

// The reference's test "[SEC] A worker declaring {privateTo:false, readerRecords:false}":
// private memory fails the turn with the rebuild problem and delivers
// nothing; shared memory runs. Adapted: the gate is the broker's (tested
// with broker.Session); here the fake broker plays it, and the test shows
// that the runtime sends the visibility the gate needs and surfaces the
// refusal without removing the container.
func TestSecPrivacyGateOldWorker(t *testing.T) {
	for _, tt := range []struct {
		visibility string
		wantOK     bool
		delivered  int
	}{{"private", false, 0}, {"shared", true, 1}} {
		t.Run(tt.visibility, func(t *testing.T) {
			f := newFixture(t, func(o *Options) {
				o.Memory = func(_ context.Context, b rtsandbox.Binding) (string, string, error) {
					return string(b.Channel) + ":" + b.Speaker.ID, tt.visibility, nil
				}
			})
			f.w.caps = wire.WorkerCapabilities{}
			_, err := f.turnIn(context.Background(), "discord:123", "a")
			if tt.wantOK != (err == nil) {
				t.Fatalf("turn error = %v; want ok %v", err, tt.wantOK)
			}
			if err != nil && !strings.Contains(err.Error(), "sandbox:test") || err != nil && !strings.Contains(err.Error(), "rebuild") {
				t.Errorf("error %q does not name the image and the rebuild", err)
			}
			if n := len(f.w.deliveredTurns()); n != tt.delivered {
				t.Errorf("%d turns delivered; want %d", n, tt.delivered)
			}
			if r := removals(f.w.takeCalls()); len(r) != 0 {
				t.Errorf("removed %v after a refused turn; want none", r)
			}
		})
	}
}

// The reference's test "[SEC] Cancel: a turn is delivered, then the caller's signal
// aborts → result not ok; the driver removed exactly the channel's
// container".
func TestSecCancelRemovesExactContainer(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	f.w.worker = hangWorker(cancel) // the caller gives up once the worker has the turn
	// Another channel's container must survive.
	f.w.running["rtsandbox-session-other"] = container.SessionSpec{Name: "rtsandbox-session-other"}
	_, err := f.turnIn(ctx, "discord:cancel", "a")
	if err == nil {
		t.Fatal("cancelled turn succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap the caller's cancellation", err)
	}
	want := []string{container.SessionName("test", "discord:cancel")}
	if diff := cmp.Diff(want, removals(f.w.takeCalls())); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if _, ok := f.w.running["rtsandbox-session-other"]; !ok {
		t.Error("another channel's container was removed")
	}
	if rec := f.log.find("sandbox turn failed"); len(rec) != 1 || rec[0].attrs["cancelled"] != true {
		t.Errorf("failure log = %+v; want one with cancelled true", rec)
	}
}

// The reference's test "[SEC] Alias collision", after issue 21 item 6a: "discord:a:b"
// and "discord:a_b" no longer share a directory (Segment is injective),
// so both run; the .channel-key record still refuses a channel whose
// directory holds another key's record (a hash collision of two long
// keys, a directory planted or left there), and the refused channel
// cannot run a turn in the other's workspace.
func TestSecAliasCollision(t *testing.T) {
	f := newFixture(t)
	for _, ch := range []rtsandbox.ChannelKey{"discord:a:b", "discord:a_b"} {
		if _, err := f.rt.AttachmentDir(ch); err != nil {
			t.Fatalf("AttachmentDir(%s) = %v", ch, err)
		}
	}
	root := filepath.Join(f.party, Segment("discord:c"))
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, keyFile), []byte("discord:other"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := f.rt.AttachmentDir("discord:c")
	if !errors.Is(err, ErrAlias) || !strings.Contains(err.Error(), "alias") {
		t.Errorf("AttachmentDir(discord:c) = %v; want the alias refusal", err)
	}
	if _, err := f.turnIn(context.Background(), "discord:c", "x"); !errors.Is(err, ErrAlias) {
		t.Errorf("turn in the aliased channel = %v; want ErrAlias", err)
	}
}

// outsideDir returns a directory outside the party dir holding name with
// content, and a function reporting whether it is unchanged.
func outsideDir(t *testing.T, name, content string) (string, func() bool) {
	t.Helper()
	dir := filepath.Join(shortDir(t), "outside")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func() bool {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != name {
			return false
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		return err == nil && string(data) == content
	}
}

// workspace returns the channel's workspace path after one turn.
func (f *fixture) workspace(t *testing.T, channel string) string {
	t.Helper()
	if _, err := f.turnIn(context.Background(), channel, "a"); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(f.party, Segment(rtsandbox.ChannelKey(channel)), "workspace")
}

// The reference's test "[SEC] startFresh with sessions symlinked to an outside dir
// holding owner-session.jsonl → the outside dir is unchanged".
func TestSecStartFreshSessionsSymlink(t *testing.T) {
	f := newFixture(t)
	ws := f.workspace(t, "discord:fresh")
	outside, unchanged := outsideDir(t, "owner-session.jsonl", "owner")
	sessions := filepath.Join(ws, "sessions")
	if err := os.RemoveAll(sessions); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, sessions); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.StartFresh("discord:fresh"); err != nil {
		t.Fatal(err)
	}
	if !unchanged() {
		t.Error("the outside directory changed")
	}
	if rec := f.log.find("Sandbox conversation archived"); len(rec) != 1 || rec[0].attrs["archived"] != int64(0) {
		t.Errorf("archive log = %+v; want archived 0", rec)
	}
}

// The reference's test "[SEC] Then, with a real sessions/ containing guest.jsonl, a
// symlink linked.jsonl → outside file, and archive symlinked to outside":
// outside unchanged; archive becomes a real directory with one timestamp
// directory holding only guest.jsonl; linked.jsonl stays in place.
func TestSecStartFreshArchive(t *testing.T) {
	f := newFixture(t)
	ws := f.workspace(t, "discord:fresh")
	outside, unchanged := outsideDir(t, "owner.jsonl", "owner")
	sessions := filepath.Join(ws, "sessions")
	if err := os.WriteFile(filepath.Join(sessions, "guest.jsonl"), []byte("guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "owner.jsonl"), filepath.Join(sessions, "linked.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sessions, "archive")); err != nil {
		t.Fatal(err)
	}
	f.w.takeCalls()
	guest := filepath.Join(sessions, "guest.jsonl")
	f.w.onRemove = func() {
		if _, err := os.Lstat(guest); err != nil {
			t.Error("sessions were archived before the container was removed")
		}
	}
	if err := f.rt.StartFresh("discord:fresh"); err != nil {
		t.Fatal(err)
	}
	if !unchanged() {
		t.Error("the outside directory changed")
	}
	// The container was removed before the archive (docs/session.md, "Session runtime" startFresh 1).
	if r := removals(f.w.takeCalls()); len(r) != 1 {
		t.Errorf("removals = %v; want the channel's container", r)
	}
	archive := filepath.Join(sessions, "archive")
	fi, err := os.Lstat(archive)
	if err != nil || !fi.IsDir() {
		t.Fatalf("archive is not a real directory: %v, %v", fi, err)
	}
	stamps, _ := os.ReadDir(archive)
	if len(stamps) != 1 {
		t.Fatalf("archive holds %d entries; want one timestamp directory", len(stamps))
	}
	files, _ := os.ReadDir(filepath.Join(archive, stamps[0].Name()))
	if len(files) != 1 || files[0].Name() != "guest.jsonl" {
		t.Errorf("archived %v; want only guest.jsonl", files)
	}
	if strings.Contains(stamps[0].Name(), ":") {
		t.Errorf("timestamp %q keeps ':'", stamps[0].Name())
	}
	if fi, err := os.Lstat(filepath.Join(sessions, "linked.jsonl")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("linked.jsonl moved or changed: %v, %v", fi, err)
	}
	if rec := f.log.find("Sandbox conversation archived"); len(rec) != 1 || rec[0].attrs["archived"] != int64(1) {
		t.Errorf("archive log = %+v; want archived 1", rec)
	}
}

// The reference's test "[SEC] workspace/attachments replaced by a symlink to outside,
// then start → attachments is a real directory and outside is unchanged".
func TestSecAttachmentsSymlinkReplaced(t *testing.T) {
	f := newFixture(t)
	ws := f.workspace(t, "discord:att")
	outside, unchanged := outsideDir(t, "secret.txt", "host")
	att := filepath.Join(ws, "attachments")
	if err := os.RemoveAll(att); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, att); err != nil {
		t.Fatal(err)
	}
	if _, err := f.turnIn(context.Background(), "discord:att", "b"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(att); err != nil || !fi.IsDir() {
		t.Errorf("attachments = %v, %v; want a real directory", fi, err)
	}
	if !unchanged() {
		t.Error("the outside directory changed")
	}
}

// The reference's test "[SEC] Container body", adapted: the runtime's half. The spec it
// hands the driver mounts exactly the channel's run and workspace
// directories, runs as the non-root worker user and carries no secret
// in its environment; the create body itself is checked in
// container/docker (TestSessionCreateBody).
func TestSecContainerSpec(t *testing.T) {
	f := newFixture(t)
	if _, err := f.turnIn(context.Background(), "discord:123", "a"); err != nil {
		t.Fatal(err)
	}
	if len(f.w.created) != 1 {
		t.Fatalf("created %d containers", len(f.w.created))
	}
	spec := f.w.created[0]
	root := filepath.Join(f.party, "discord_123")
	uid, gid := workerUser()
	want := container.SessionSpec{
		Name: container.SessionName("test", "discord:123"), Image: testImage, Installation: "test",
		Channel: "discord:123", Profile: "studio", UID: uid, GID: gid,
		RunDir: filepath.Join(root, "run"), WorkspaceDir: filepath.Join(root, "workspace"),
	}.WithDefaults()
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	wantEnv := []string{"SANDBOX_PROFILE=studio", "TZ=UTC", "HOME=/tmp/home", "CLAUDE_CODE_OAUTH_TOKEN=sandbox-dummy-token"}
	if diff := cmp.Diff(wantEnv, spec.Env()); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// The reference's test "[SEC] Per-speaker token", adapted: our broker gets each turn's
// Binding from Bind and resolves credentials per speaker itself (the
// reference's oauthToken(scope)). Two turns by a and b bind the broker to
// channel discord:123 and each speaker in turn, and the worker-visible
// turns never carry the principal id.
func TestSecPerSpeakerBinding(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"a", "b"} {
		if _, err := f.turnIn(context.Background(), "discord:123", id); err != nil {
			t.Fatal(err)
		}
	}
	var got []rtsandbox.Binding
	for _, b := range f.w.binds {
		got = append(got, b.Binding)
		if b.Profile != "studio" || b.Thinking != "high" || b.Deadline.IsZero() {
			t.Errorf("binding %+v lacks profile, thinking or deadline", b)
		}
	}
	want := []rtsandbox.Binding{binding("discord:123", "a"), binding("discord:123", "b")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bindings (-want +got):\n%s", diff)
	}
	for _, d := range f.w.deliveredTurns() {
		if d.Author.PrincipalID != "" {
			t.Errorf("worker saw principal %q", d.Author.PrincipalID)
		}
	}
}

// [SEC] docs/session.md, "Directories and defences" ownDirectory: whatever a guest planted in place of sessions/,
// attachments/ or outbox/ (a file, a FIFO, a link to a host file) is
// replaced by a real directory on the next start, and the link's target
// is untouched. A FIFO planted as a *.jsonl is not archived and does not
// block StartFresh.
func TestSecPlantedEntriesReplaced(t *testing.T) {
	plants := map[string]func(t *testing.T, path, outsideFile string){
		"file": func(t *testing.T, path, _ string) {
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t *testing.T, path, _ string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"link to a host file": func(t *testing.T, path, outsideFile string) {
			if err := os.Symlink(outsideFile, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for kind, plant := range plants {
		for _, dir := range []string{"sessions", "attachments", "outbox"} {
			t.Run(kind+" as "+dir, func(t *testing.T) {
				f := newFixture(t)
				ws := f.workspace(t, "discord:plant")
				outside, unchanged := outsideDir(t, "host.txt", "host")
				target := filepath.Join(ws, dir)
				if err := os.RemoveAll(target); err != nil {
					t.Fatal(err)
				}
				plant(t, target, filepath.Join(outside, "host.txt"))
				if _, err := f.turnIn(context.Background(), "discord:plant", "b"); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Lstat(target); err != nil || !fi.IsDir() {
					t.Errorf("%s = %v, %v; want a real directory", dir, fi, err)
				}
				if !unchanged() {
					t.Error("the host file changed")
				}
			})
		}
	}
	t.Run("fifo as a session file", func(t *testing.T) {
		f := newFixture(t)
		ws := f.workspace(t, "discord:fifo")
		fifo := filepath.Join(ws, "sessions", "hang.jsonl")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.rt.StartFresh("discord:fifo"); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO moved: %v, %v", fi, err)
		}
	})
}
