package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/attach"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Issue 21 item 3: a full workspace never locks a channel. Each test runs
// with the hard bound (a real loop-mounted image; root) and the soft one.

// boundModes are the two bounds the wedge tests run under.
var boundModes = []DiskMode{DiskHard, DiskSoft}

// boundFixture is a fixture with mode's bound of 64 MiB and 512 entries,
// turns long enough to write tens of MiB; channel is removed (and its
// workspace unmounted) when the test ends.
func boundFixture(t *testing.T, mode DiskMode, channel rtsandbox.ChannelKey) *fixture {
	t.Helper()
	edit := func(o *Options) {
		o.Disk = DiskOptions{Mode: mode, SizeMB: 64, MaxFiles: 512}
		o.TurnTimeout = time.Minute
	}
	var f *fixture
	if mode == DiskHard {
		f = hardFixture(t, edit)
	} else {
		f = newFixture(t, edit)
	}
	t.Cleanup(func() {
		if err := f.rt.Remove(context.Background(), channel); err != nil {
			t.Errorf("Remove = %v", err)
		}
	})
	return f
}

// fill writes zeros to path until the workspace refuses (hard: ENOSPC)
// or, in soft mode, until size bytes are written, as a compromised
// worker could. It returns how many bytes went.
func fill(t *testing.T, path string, size int) int {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	written := 0
	for written < size {
		n, err := f.Write(chunk[:min(len(chunk), size-written)])
		written += n
		if errors.Is(err, syscall.ENOSPC) {
			return written
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return written
}

// attack is the finding's wedge: three messages, one of a 24 MiB file,
// then two of 20 files of halving size (12 MiB, 6 MiB …).
func attack() [][]rtsandbox.Attachment {
	one := []rtsandbox.Attachment{{Name: "big.bin", Data: make([]byte, 24<<20)}}
	var halving []rtsandbox.Attachment
	for i := range 20 {
		halving = append(halving, rtsandbox.Attachment{Name: fmt.Sprintf("h%d.bin", i), Data: make([]byte, max(12<<20>>i, 1))})
	}
	return [][]rtsandbox.Attachment{one, halving, halving}
}

// A guest who sends the finding's three messages of attachments fills
// the workspace only up to the reserve its turns need: the files past it
// are refused with the attachments notice (AttachNoRoomReason), the
// workspace keeps at least turnReserveBytes free, every message's turn
// runs, and a later turn of another guest runs too, with the room its
// own files may take. Remove the room check in collection.take and the
// hard case fails (the third message's turn is refused: the workspace is
// full).
func TestAttachmentsKeepTheTurnReserve(t *testing.T) {
	for _, mode := range boundModes {
		t.Run(string(mode), func(t *testing.T) {
			const ch = "http:wedge"
			f := boundFixture(t, mode, ch)
			ctx := context.Background()
			var notices int
			for i, files := range attack() {
				res, err := f.rt.RunInput(ctx, binding(ch, "mallory"), rtsandbox.TurnInput{
					MessageID: fmt.Sprintf("m%d", i), Text: "keep these", Attachments: files,
				})
				if err != nil {
					t.Fatalf("message %d = %v", i, err)
				}
				if strings.Contains(res.Text, rtsandbox.AttachNoRoomReason) {
					notices++
				}
			}
			if notices == 0 {
				t.Error("no message was told its files found no room")
			}
			ws, err := f.rt.workspace(ch)
			if err != nil {
				t.Fatal(err)
			}
			u, err := f.rt.s.disk.use(ws)
			if err != nil {
				t.Fatal(err)
			}
			if free := u.maxBytes - u.bytes; free < turnReserveBytes || u.files > u.maxFiles-turnReserveFiles {
				t.Errorf("the attachments left %d bytes and %d entries free; want at least %d and %d",
					free, u.maxFiles-u.files, turnReserveBytes, turnReserveFiles)
			}
			if recs := f.log.find("attachment refused: the workspace keeps its reserve for the channel's turns"); len(recs) == 0 {
				t.Error("no operator record of the refused attachments")
			}
			before := len(f.w.deliveredTurns())
			if _, err := f.turnIn(ctx, ch, "bob"); err != nil {
				t.Fatalf("another guest's turn after the attack = %v", err)
			}
			turns := f.w.deliveredTurns()
			if len(turns) != before+1 {
				t.Fatalf("%d turns delivered; want %d", len(turns), before+1)
			}
			room := turns[len(turns)-1].Room
			if room == nil || room.Bytes > u.maxBytes-u.bytes-turnReserveBytes || room.Bytes < 0 {
				t.Errorf("turn room = %+v; want at most what is free less the reserve (%d)", room, u.maxBytes-u.bytes-turnReserveBytes)
			}
		})
	}
}

// The owner's fresh works on a workspace filled to its last byte, with a
// conversation to archive in it: the old conversation's files go first,
// so archiving finds the room it needs, the conversation is archived, and
// the next turn runs. Before the fix, archiving made its directories in
// the full image and failed with ENOSPC, which the owner was told was
// the host's disk.
func TestDiskFreshOnFullWorkspace(t *testing.T) {
	for _, mode := range boundModes {
		t.Run(string(mode), func(t *testing.T) {
			const ch = "http:full"
			f := boundFixture(t, mode, ch)
			ctx := context.Background()
			if _, err := f.turnIn(ctx, ch, "a"); err != nil {
				t.Fatal(err)
			}
			ws, _ := f.rt.workspace(ch)
			writeFile(t, filepath.Join(ws, sessionsName, "talk.jsonl"), 4096)
			fill(t, filepath.Join(ws, attachmentName, "m0-0-big.bin"), 70<<20)
			if mode == DiskHard { // the last inodes too
				for i := 0; ; i++ {
					if err := os.WriteFile(filepath.Join(ws, attachmentName, fmt.Sprint("e", i)), nil, 0o600); err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							t.Fatal(err)
						}
						break
					}
				}
			}
			if _, err := f.turnIn(ctx, ch, "b"); !errors.Is(err, rtsandbox.ErrWorkspaceFull) {
				t.Fatalf("turn in the full workspace = %v; want ErrWorkspaceFull", err)
			}
			if err := f.rt.StartFresh(ch); err != nil {
				t.Fatalf("fresh on a full workspace = %v", err)
			}
			archived, _ := filepath.Glob(filepath.Join(ws, sessionsName, archiveName, "*", "talk.jsonl"))
			if len(archived) != 1 {
				t.Errorf("archive = %v; want the conversation kept", archived)
			}
			left, err := os.ReadDir(filepath.Join(ws, attachmentName))
			if err != nil || len(left) != 0 {
				t.Errorf("attachments after fresh = %d entries (%v); want none", len(left), err)
			}
			if _, err := f.turnIn(ctx, ch, "c"); err != nil {
				t.Fatalf("turn after fresh = %v", err)
			}
		})
	}
}

// When the conversation alone fills a hard workspace, there is no room
// to archive it: fresh removes it (with an operator record) rather than
// failing, and the next turn runs.
func TestDiskFreshConversationFillsWorkspace(t *testing.T) {
	const ch = "http:talky"
	f := boundFixture(t, DiskHard, ch)
	ctx := context.Background()
	if _, err := f.turnIn(ctx, ch, "a"); err != nil {
		t.Fatal(err)
	}
	ws, _ := f.rt.workspace(ch)
	for _, name := range []string{outboxName, attachmentName, "lost+found"} { // what fresh would free first
		if err := os.Remove(filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, filepath.Join(ws, sessionsName, "talk.jsonl"), 70<<20)
	for i := 0; ; i++ { // the inodes the archive would need
		if err := os.Mkdir(filepath.Join(ws, sessionsName, fmt.Sprint("d", i)), 0o700); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if err := f.rt.StartFresh(ch); err != nil {
		t.Fatalf("fresh = %v", err)
	}
	if recs := f.log.find("session conversation not archived: it fills the channel's workspace by itself and is removed"); len(recs) != 1 {
		t.Errorf("records = %+v; want one", recs)
	}
	if _, err := f.turnIn(ctx, ch, "b"); err != nil {
		t.Fatalf("turn after fresh = %v", err)
	}
}

// The owner's stop works on a workspace its worker filled during the
// turn: the running turn ends (stopped, not failed for the disk), its
// container goes, and fresh then restores the channel.
func TestDiskStopOnFullWorkspace(t *testing.T) {
	for _, mode := range boundModes {
		t.Run(string(mode), func(t *testing.T) {
			const ch = "http:stop"
			f := boundFixture(t, mode, ch)
			if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
				t.Fatal(err)
			}
			ws, _ := f.rt.workspace(ch)
			done := f.hangingTurnAfter(ch, func() { fill(t, filepath.Join(ws, "junk"), 70<<20) })
			if !f.rt.Stop(rtsandbox.ChannelKey(ch)) {
				t.Fatal("stop found no running turn")
			}
			if err := <-done; !errors.Is(err, rtsandbox.ErrTurnStopped) || errors.Is(err, rtsandbox.ErrWorkspaceFull) {
				t.Fatalf("stopped turn = %v; want rtsandbox.ErrTurnStopped", err)
			}
			if rm := removals(f.w.takeCalls()); len(rm) == 0 || rm[len(rm)-1] != f.rt.name(ch) {
				t.Errorf("removals = %v; want the channel's container", rm)
			}
			if err := f.rt.StartFresh(ch); err != nil {
				t.Fatalf("fresh = %v", err)
			}
			f.w.worker = newWorld().worker
			if _, err := f.turnIn(context.Background(), ch, "b"); err != nil {
				t.Fatalf("turn after stop and fresh = %v", err)
			}
		})
	}
}

// hangingTurnAfter is hangingTurn whose worker first runs write.
func (f *fixture) hangingTurnAfter(channel string, write func()) <-chan error {
	delivered := make(chan struct{})
	f.w.worker = hangWorker(func() { write(); close(delivered) })
	done := make(chan error, 1)
	go func() { _, err := f.turnIn(context.Background(), channel, "x"); done <- err }()
	<-delivered
	return done
}

// ENOSPC inside a hard workspace is the workspace's: a turn whose
// directories cannot be made there is refused with WorkspaceFullText,
// never the host's disk-full or a generic failure; in soft mode the
// workspace is the host's filesystem, so its ENOSPC stays the host's.
func TestDiskENOSPCIsTheWorkspaces(t *testing.T) {
	enospc := fmt.Errorf("own directory attachments: %w", syscall.ENOSPC)
	for _, tc := range []struct {
		mode     DiskMode
		wantKind rtsandbox.Kind
	}{
		{DiskHard, rtsandbox.KindWorkspaceFull},
		{DiskSoft, rtsandbox.KindDiskFull},
		{DiskOff, rtsandbox.KindDiskFull},
	} {
		d := &disk{DiskOptions: DiskOptions{Mode: tc.mode}}
		if got := rtsandbox.KindOf(d.classify(enospc)); got != tc.wantKind {
			t.Errorf("%q: kind %v; want %v", tc.mode, got, tc.wantKind)
		}
	}

	const ch = "http:nospace"
	f := boundFixture(t, DiskHard, ch)
	if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
		t.Fatal(err)
	}
	ws, _ := f.rt.workspace(ch)
	if err := os.RemoveAll(filepath.Join(ws, attachmentName)); err != nil {
		t.Fatal(err)
	}
	fill(t, filepath.Join(ws, "junk"), 70<<20)
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprint("e", i)), nil, 0o600); err != nil {
			break
		}
	}
	_, err := f.turnIn(context.Background(), ch, "b")
	if !errors.Is(err, syscall.ENOSPC) || rtsandbox.GuestText(err) != rtsandbox.WorkspaceFullText {
		t.Fatalf("turn = %v (guest text %q); want the ENOSPC with WorkspaceFullText", err, rtsandbox.GuestText(err))
	}
}

// The owner's status shows the workspace against its bound: nothing
// before the channel's first turn, its use after, full once turns are
// refused.
func TestStatusShowsWorkspaceUsage(t *testing.T) {
	for _, mode := range boundModes {
		t.Run(string(mode), func(t *testing.T) {
			const ch = "http:status"
			f := boundFixture(t, mode, ch)
			ctx := context.Background()
			if st, err := f.rt.Status(ctx, ch); err != nil || st.Workspace != nil {
				t.Fatalf("status before the first turn = %+v, %v; want no workspace", st.Workspace, err)
			}
			if _, err := f.turnIn(ctx, ch, "a"); err != nil {
				t.Fatal(err)
			}
			ws, _ := f.rt.workspace(ch)
			writeFile(t, filepath.Join(ws, "one.bin"), 1<<20)
			st, err := f.rt.Status(ctx, ch)
			if err != nil || st.Workspace == nil {
				t.Fatalf("status = %+v, %v", st, err)
			}
			w := *st.Workspace
			if w.Mode != string(mode) || !w.Mounted || w.Full || w.Bytes < 1<<20 || w.Bytes > 8<<20 || w.Files < 4 || w.MaxFiles > 512 {
				t.Errorf("workspace = %+v; want %s, mounted, about 1 MiB and a few files of 512, not full", w, mode)
			}
			if mode == DiskSoft && (w.MaxBytes != 64<<20 || w.MaxFiles != 512) {
				t.Errorf("soft bound = %d bytes, %d files; want the configured 64 MiB, 512", w.MaxBytes, w.MaxFiles)
			}
			fill(t, filepath.Join(ws, "junk"), 70<<20)
			if st, err = f.rt.Status(ctx, ch); err != nil || st.Workspace == nil || !st.Workspace.Full {
				t.Errorf("status of a full workspace = %+v, %v; want full", st.Workspace, err)
			}
			if mode == DiskHard {
				if err := f.rt.Remove(ctx, ch); err != nil {
					t.Fatal(err)
				}
				if st, err = f.rt.Status(ctx, ch); err != nil || st.Workspace == nil || st.Workspace.Mounted {
					t.Errorf("status of an unmounted workspace = %+v, %v; want not mounted", st.Workspace, err)
				}
			}
		})
	}
}

// The room a turn's inputs may take is the bound less the reserve less
// what is used, never negative, nothing for a tree too deep to measure;
// a message's files are counted in whole blocks plus one, one entry
// each, and a file that does not fit is refused without being counted.
func TestTurnReserveArithmetic(t *testing.T) {
	const mib = 1 << 20
	rooms := []struct {
		name string
		u    diskUse
		want wire.SessionRoom
	}{
		{"empty", diskUse{maxBytes: 64 * mib, maxFiles: 512}, wire.SessionRoom{Bytes: 52 * mib, Files: 448}},
		{"half", diskUse{bytes: 32 * mib, maxBytes: 64 * mib, files: 100, maxFiles: 512}, wire.SessionRoom{Bytes: 20 * mib, Files: 348}},
		{"at the reserve", diskUse{bytes: 52 * mib, maxBytes: 64 * mib, files: 448, maxFiles: 512}, wire.SessionRoom{}},
		{"into the reserve", diskUse{bytes: 60 * mib, maxBytes: 64 * mib, files: 500, maxFiles: 512}, wire.SessionRoom{}},
		{"over the bound", diskUse{bytes: 70 * mib, maxBytes: 64 * mib, files: 600, maxFiles: 512}, wire.SessionRoom{}},
		{"too deep", diskUse{maxBytes: 64 * mib, maxFiles: 512, deep: true}, wire.SessionRoom{}},
	}
	for _, tc := range rooms {
		if diff := cmp.Diff(tc.want, tc.u.room()); diff != "" {
			t.Errorf("%s: room (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := []int64{wire.FileCost(1), wire.FileCost(4096), wire.FileCost(4097), wire.FileCost(0)}; !cmp.Equal(got, []int64{8192, 8192, 12288, 4096}) {
		t.Errorf("FileCost = %v", got)
	}
	room := wire.SessionRoom{Bytes: 3 * mib, Files: 2}
	b := inputBudget{&room}
	got := []bool{b.take(2 * mib), b.take(2 * mib), b.take(mib - 8192), b.take(1)}
	if !cmp.Equal(got, []bool{true, false, true, false}) {
		t.Errorf("takes = %v; want the second refused (bytes) and the fourth (entries)", got)
	}
	if room.Files != 0 || room.Bytes != 0 {
		t.Errorf("room left = %+v; want none", room)
	}
	if !(inputBudget{}).take(1 << 40) {
		t.Error("no bound refused a file")
	}
	if r := attach.ReasonNoRoom.GuestText(); r != rtsandbox.AttachNoRoomReason {
		t.Errorf("ReasonNoRoom text = %q", r)
	}
}
