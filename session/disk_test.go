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
	"github.com/rtsandbox/rtsandbox/wire"
	"golang.org/x/sys/unix"
)

// writeFile writes size bytes at dir/name, making its directories.
func writeFile(t testing.TB, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
}

// age sets path's modification time (without following a link) to d ago.
func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	ts := time.Now().Add(-d)
	if err := os.Chtimes(path, ts, ts); err != nil {
		t.Fatal(err)
	}
}

func TestResolveDisk(t *testing.T) {
	can := DiskSupport{Hard: true, Reason: "root, /dev/loop-control, mke2fs and ext4 are available"}
	cannot := DiskSupport{Reason: "rtsandbox does not run as root, and mounting a filesystem needs root"}
	tests := []struct {
		name    string
		mode    DiskMode
		sup     DiskSupport
		want    DiskMode
		why     string
		wantErr error
	}{
		{"auto-takes-hard", DiskAuto, can, DiskHard, "auto: root, /dev/loop-control, mke2fs and ext4 are available", nil},
		{"auto-falls-back-to-soft", DiskAuto, cannot, DiskSoft, "auto: the hard bound is unavailable: rtsandbox does not run as root, and mounting a filesystem needs root", nil},
		{"hard", DiskHard, can, DiskHard, "session.disk.mode is hard: root, /dev/loop-control, mke2fs and ext4 are available", nil},
		{"hard-unavailable-is-refused", DiskHard, cannot, DiskOff, "", ErrDiskUnavailable},
		{"soft-even-where-hard-is-possible", DiskSoft, can, DiskSoft, "session.disk.mode is soft", nil},
		{"off", DiskOff, can, DiskOff, "no disk bound is configured", nil},
		{"unknown", "quota", can, DiskOff, "", rtsandbox.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mode, why, err := ResolveDisk(tt.mode, tt.sup)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v; want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff([]string{string(tt.want), tt.why}, []string{string(mode), why}); diff != "" {
				t.Errorf("mode, why (-want +got):\n%s", diff)
			}
			if tt.wantErr == ErrDiskUnavailable && !strings.Contains(err.Error(), cannot.Reason) {
				t.Errorf("the refusal %q does not name the reason", err)
			}
		})
	}
}

// New refuses disk options out of range; the zero value bounds nothing.
func TestDiskOptionsRefused(t *testing.T) {
	for name, o := range map[string]DiskOptions{
		"mode":        {Mode: "quota", SizeMB: 64, MaxFiles: 256},
		"size-small":  {Mode: DiskSoft, SizeMB: 63, MaxFiles: 256},
		"files-few":   {Mode: DiskSoft, SizeMB: 64, MaxFiles: 255},
		"files-dense": {Mode: DiskSoft, SizeMB: 64, MaxFiles: 64*DiskFilesPerMB + 1},
		"prune":       {Mode: DiskSoft, SizeMB: 64, MaxFiles: 256, PruneAfter: -time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			o2 := testOptions(shortDir(t), newWorld(), &logSink{})
			o2.Disk = o
			if _, err := New(o2); !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("New = %v; want ErrInvalid", err)
			}
		})
	}
}

// The soft measure counts every entry and its allocated bytes, follows
// no link (a link to a big tree outside counts as one entry), never
// blocks on a FIFO, stops once a bound is passed, and counts a tree too
// deep to walk as over the bound.
func TestMeasure(t *testing.T) {
	outside := shortDir(t)
	writeFile(t, filepath.Join(outside, "big"), 4<<20)
	for i := range 50 {
		writeFile(t, filepath.Join(outside, "many", fmt.Sprint(i)), 1)
	}
	tests := []struct {
		name     string
		plant    func(t *testing.T, ws string)
		maxBytes int64
		maxFiles int
		check    func(t *testing.T, u diskUse)
	}{
		{"files-and-dirs", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "a", "b", "one"), 8192)
			writeFile(t, filepath.Join(ws, "two"), 1)
		}, 1 << 30, 1000, func(t *testing.T, u diskUse) {
			if u.files != 4 || u.bytes < 8192 || u.bytes > 1<<20 || u.over(0, 0) != "" {
				t.Errorf("use = %+v; want 4 entries, 8 KiB and some", u)
			}
		}},
		{"sparse-file-counts-what-it-holds", func(t *testing.T, ws string) {
			f, err := os.Create(filepath.Join(ws, "sparse"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(1 << 40); err != nil {
				t.Fatal(err)
			}
		}, 1 << 20, 1000, func(t *testing.T, u diskUse) {
			if u.over(0, 0) != "" {
				t.Errorf("a sparse file of 1 TiB apparent size is over: %+v", u)
			}
		}},
		{"sec-symlinks-not-followed", func(t *testing.T, ws string) {
			for _, l := range []string{"to-big", "to-many", "to-root"} {
				target := map[string]string{"to-big": filepath.Join(outside, "big"), "to-many": filepath.Join(outside, "many"), "to-root": "/"}[l]
				if err := os.Symlink(target, filepath.Join(ws, l)); err != nil {
					t.Fatal(err)
				}
			}
		}, 1 << 20, 10, func(t *testing.T, u diskUse) {
			if u.files != 3 || u.bytes > 64<<10 || u.over(0, 0) != "" {
				t.Errorf("use = %+v; want 3 links counted as links", u)
			}
		}},
		{"fifo-never-blocks", func(t *testing.T, ws string) {
			if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, 1 << 20, 10, func(t *testing.T, u diskUse) {
			if u.files != 1 {
				t.Errorf("use = %+v; want the FIFO counted", u)
			}
		}},
		{"over-the-file-bound", func(t *testing.T, ws string) {
			for i := range 30 {
				writeFile(t, filepath.Join(ws, fmt.Sprint(i)), 0)
			}
		}, 1 << 30, 20, func(t *testing.T, u diskUse) {
			if u.over(0, 0) != "files" || u.files != 21 {
				t.Errorf("use = %+v; want over the file bound, the walk stopped at 21", u)
			}
		}},
		{"over-the-size-bound", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "x"), 2<<20)
		}, 1 << 20, 100, func(t *testing.T, u diskUse) {
			if u.over(0, 0) != "size" {
				t.Errorf("use = %+v; want over the size bound", u)
			}
		}},
		{"too-deep-to-measure-is-over", func(t *testing.T, ws string) {
			deepTree(t, ws, maxWalkDepth+5)
		}, 1 << 30, 100000, func(t *testing.T, u diskUse) {
			if u.over(0, 0) != "depth" || !u.deep {
				t.Errorf("use = %+v; want over by depth", u)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := shortDir(t)
			tt.plant(t, ws)
			u, err := measure(ws, tt.maxBytes, tt.maxFiles)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, u)
		})
	}
}

// deepTree makes depth nested directories under dir, one file at the
// bottom, and returns the bottom directory. It works by descriptors, as
// paths that deep pass PATH_MAX.
func deepTree(t testing.TB, dir string, depth int) {
	t.Helper()
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := syscall.Mkdirat(fd, "d", 0o700); err != nil {
			t.Fatal(err)
		}
		sub, err := openSub(fd, "d")
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
		fd = sub
	}
	if err := writeNewFileAt(fd, "bottom", []byte("x")); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
}

// A measured workspace is one mounted path: the walk refuses a
// workspace that is itself a link.
func TestSecMeasureRefusesLinkedWorkspace(t *testing.T) {
	dir := shortDir(t)
	if err := os.Symlink("/", filepath.Join(dir, "ws")); err != nil {
		t.Fatal(err)
	}
	if _, err := measure(filepath.Join(dir, "ws"), 1<<20, 10); !errors.Is(err, ErrSymlink) {
		t.Errorf("measure through a link = %v; want ErrSymlink", err)
	}
}

// Pruning removes outbox and attachment files older than the cutoff and
// the old directories it emptied; younger files, other directories and
// everything outside stay.
func TestPrune(t *testing.T) {
	ws := shortDir(t)
	old, young := 8*24*time.Hour, time.Hour
	files := map[string]time.Duration{
		"outbox/t1/old.png":       old,
		"outbox/t1/young.png":     young,
		"outbox/t2/old.txt":       old,
		"outbox/t3/deep/old.txt":  old,
		"attachments/m-0-old.png": old,
		"attachments/m-1-new.png": young,
		"sessions/old.jsonl":      old,
		"old-work.txt":            old,
	}
	for name, d := range files {
		writeFile(t, filepath.Join(ws, name), 10)
		age(t, filepath.Join(ws, name), d)
	}
	for _, d := range []string{"outbox/t2", "outbox/t3/deep", "outbox/t3"} {
		age(t, filepath.Join(ws, d), old)
	}
	n, err := prune(ws, time.Now().Add(-7*24*time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			left = append(left, strings.TrimPrefix(p, ws+"/"))
		}
		return nil
	})
	want := []string{"attachments/m-1-new.png", "old-work.txt", "outbox/t1/young.png", "sessions/old.jsonl"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("left after pruning (-want +got):\n%s", diff)
	}
	for _, gone := range []string{"outbox/t2", "outbox/t3"} {
		if _, err := os.Lstat(filepath.Join(ws, gone)); !os.IsNotExist(err) {
			t.Errorf("%s stayed: %v", gone, err)
		}
	}
	if n != 7 { // 4 old files, t2, t3/deep and t3
		t.Errorf("removed %d entries; want 7", n)
	}
}

// [SEC] An outbox (or attachments) directory that a guest replaced with
// a link to a directory outside is not followed: the files there stay,
// however old. A link inside the outbox is removed as a link; its target
// stays.
func TestSecPruneSymlinkedOutboxNotFollowed(t *testing.T) {
	ws, outside := shortDir(t), shortDir(t)
	old := 30 * 24 * time.Hour
	for _, name := range []string{"victim.txt", "sub/victim.txt"} {
		writeFile(t, filepath.Join(outside, name), 10)
		age(t, filepath.Join(outside, name), old)
	}
	if err := os.Symlink(outside, filepath.Join(ws, outboxName)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, attachmentName, "keep"), 1)
	if err := os.Symlink(filepath.Join(outside, "victim.txt"), filepath.Join(ws, attachmentName, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "sub"), filepath.Join(ws, attachmentName, "dirlink")); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"link", "dirlink"} {
		ts := time.Now().Add(-old)
		if err := lchtimes(filepath.Join(ws, attachmentName, l), ts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := prune(ws, time.Now().Add(-24*time.Hour), 1000); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"victim.txt", "sub/victim.txt"} {
		if _, err := os.Stat(filepath.Join(outside, name)); err != nil {
			t.Errorf("outside %s was touched: %v", name, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(ws, outboxName)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the planted outbox link = %v, %v; pruning must neither follow nor remove it", fi, err)
	}
	for _, l := range []string{"link", "dirlink"} {
		if _, err := os.Lstat(filepath.Join(ws, attachmentName, l)); !os.IsNotExist(err) {
			t.Errorf("old link %s stayed: %v", l, err)
		}
	}
}

// lchtimes sets a link's own times.
func lchtimes(path string, ts time.Time) error {
	tv := unix.NsecToTimespec(ts.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{tv, tv}, unix.AT_SYMLINK_NOFOLLOW)
}

// Pruning looks at no more entries than its budget per turn.
func TestPruneBudget(t *testing.T) {
	ws := shortDir(t)
	for i := range 40 {
		p := filepath.Join(ws, outboxName, "t", fmt.Sprint(i))
		writeFile(t, p, 1)
		age(t, p, 48*time.Hour)
	}
	n, err := prune(ws, time.Now().Add(-time.Hour), 11)
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 { // the directory t takes one of the 11
		t.Errorf("removed %d; want 10 within a budget of 11", n)
	}
}

// removeEntry removes a tree far deeper than the walk's depth bound,
// without following links in it.
func TestRemoveEntryDeepTree(t *testing.T) {
	dir, outside := shortDir(t), shortDir(t)
	writeFile(t, filepath.Join(outside, "keep"), 1)
	if err := os.Mkdir(filepath.Join(dir, "tree"), 0o700); err != nil {
		t.Fatal(err)
	}
	deepTree(t, filepath.Join(dir, "tree"), 3*maxWalkDepth+7)
	if err := os.Symlink(outside, filepath.Join(dir, "tree", "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	n, err := removeEntry(fd, "tree")
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 || n != 3*maxWalkDepth+7+3 {
		t.Errorf("left %v after removing %d entries; want nothing, %d removed", entries, n, 3*maxWalkDepth+10)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("the link's target was touched: %v", err)
	}
}

// softFixture is a runtime whose workspaces have the soft bound: 64 MiB,
// 256 entries, pruning after a day.
func softFixture(t *testing.T) *fixture {
	return newFixture(t, func(o *Options) {
		o.Disk = DiskOptions{Mode: DiskSoft, SizeMB: 64, MaxFiles: 256, PruneAfter: 24 * time.Hour}
	})
}

// Soft mode: a worker that writes past the bound within its turn
// overshoots (soft mode cannot stop it mid-turn), but its container is
// removed when the turn ends, the next turn is refused before anything
// runs with the fixed guest text, the operator log names the bound, and
// the owner's fresh frees the workspace so the turn after it runs.
func TestDiskSoftNextTurnRefused(t *testing.T) {
	f := softFixture(t)
	ctx := context.Background()
	if _, err := f.turnIn(ctx, "discord:soft", "a"); err != nil {
		t.Fatalf("first turn = %v", err)
	}
	ws, err := f.rt.workspace("discord:soft")
	if err != nil {
		t.Fatal(err)
	}
	f.w.worker = func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
		for i := range 300 { // past the 256 entries
			writeFile(t, filepath.Join(ws, "junk", fmt.Sprint(i)), 1)
		}
		return wire.SessionResult{OK: true, Text: "wrote"}, nil
	}
	if res, err := f.turnIn(ctx, "discord:soft", "b"); err != nil || res.Text != "wrote" {
		t.Fatalf("writing turn = %+v, %v", res, err)
	}
	name := f.rt.name("discord:soft")
	if calls := f.w.takeCalls(); !strings.Contains(strings.Join(calls, " "), "remove:"+name) {
		t.Errorf("the container of a turn that ended over the bound was not removed: %v", calls)
	}
	if recs := f.log.find("session workspace over its disk bound after the turn: container removed"); len(recs) != 1 || recs[0].attrs["bound"] != "files" {
		t.Errorf("after-turn records = %+v", recs)
	}

	delivered := len(f.w.deliveredTurns())
	_, err = f.turnIn(ctx, "discord:soft", "c")
	if !errors.Is(err, rtsandbox.ErrWorkspaceFull) || rtsandbox.GuestText(err) != rtsandbox.WorkspaceFullText {
		t.Fatalf("turn over the bound = %v (guest text %q); want ErrWorkspaceFull, WorkspaceFullText", err, rtsandbox.GuestText(err))
	}
	if len(f.w.deliveredTurns()) != delivered {
		t.Error("the refused turn reached the worker")
	}
	if calls := f.w.takeCalls(); !strings.Contains(strings.Join(calls, " "), "remove:"+name) {
		t.Errorf("the refused turn left the container of a soft workspace over its bound: %v", calls)
	}
	recs := f.log.find("session workspace over its disk bound: turn refused")
	if len(recs) != 1 || recs[0].attrs["bound"] != "files" || recs[0].attrs["max_files"] != int64(256) {
		t.Errorf("refusal records = %+v; want one naming the files bound", recs)
	}

	if err := f.rt.StartFresh("discord:soft"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "junk")); !os.IsNotExist(err) {
		t.Errorf("fresh left the junk: %v", err)
	}
	f.w.worker = newWorld().worker
	if _, err := f.turnIn(ctx, "discord:soft", "d"); err != nil {
		t.Fatalf("turn after fresh = %v", err)
	}
}

// Fresh empties a full workspace only as far as it must: the outbox and
// attachments go first, and a conversation archive stays when removing
// them was enough.
func TestDiskFreshFreesInOrder(t *testing.T) {
	f := softFixture(t)
	ctx := context.Background()
	if _, err := f.turnIn(ctx, "discord:order", "a"); err != nil {
		t.Fatal(err)
	}
	ws, _ := f.rt.workspace("discord:order")
	writeFile(t, filepath.Join(ws, sessionsName, "s.jsonl"), 1<<20)
	writeFile(t, filepath.Join(ws, "work", "keep.txt"), 1)
	writeFile(t, filepath.Join(ws, outboxName, "t", "big.bin"), 70<<20)
	if err := f.rt.StartFresh("discord:order"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ws, outboxName, "t")); !os.IsNotExist(err) {
		t.Errorf("the outbox stayed: %v", err)
	}
	archived, _ := filepath.Glob(filepath.Join(ws, sessionsName, archiveName, "*", "s.jsonl"))
	if len(archived) != 1 {
		t.Errorf("archive = %v; want the conversation kept", archived)
	}
	if _, err := os.Stat(filepath.Join(ws, "work", "keep.txt")); err != nil {
		t.Errorf("other work went although the outbox was enough: %v", err)
	}
}

// Pruning at a turn's start removes old outbox and attachment files.
func TestDiskPruneAtTurnStart(t *testing.T) {
	f := softFixture(t)
	ctx := context.Background()
	if _, err := f.turnIn(ctx, "discord:prune", "a"); err != nil {
		t.Fatal(err)
	}
	ws, _ := f.rt.workspace("discord:prune")
	oldFile := filepath.Join(ws, attachmentName, "m-0-old.png")
	writeFile(t, oldFile, 1)
	age(t, oldFile, 48*time.Hour)
	if _, err := f.turnIn(ctx, "discord:prune", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(oldFile); !os.IsNotExist(err) {
		t.Errorf("old attachment stayed: %v", err)
	}
	if recs := f.log.find("session workspace pruned"); len(recs) != 1 || recs[0].attrs["removed"] != int64(1) {
		t.Errorf("prune records = %+v", recs)
	}
}

func TestParseMountInfo(t *testing.T) {
	tests := []struct {
		line string
		want mountInfo
		ok   bool
	}{
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
			mountInfo{major: 98, minor: 0, point: "/mnt2", options: "rw,noatime", fsType: "ext3", source: "/dev/root"}, true},
		{"812 27 7:3 / /srv/party/discord_1/workspace rw,nosuid,nodev,noexec,noatime - ext4 /dev/loop3 rw",
			mountInfo{major: 7, minor: 3, point: "/srv/party/discord_1/workspace", options: "rw,nosuid,nodev,noexec,noatime", fsType: "ext4", source: "/dev/loop3"}, true},
		{`40 27 0:50 / /srv/a\040b\134c rw shared:5 master:2 - tmpfs tmpfs rw`,
			mountInfo{major: 0, minor: 50, point: `/srv/a b\c`, options: "rw", fsType: "tmpfs", source: "tmpfs"}, true},
		{"40 27 0:50 / /x rw", mountInfo{}, false},
		{"40 27 0:50 / /x rw - tmpfs", mountInfo{}, false},
		{"40 27 zero / /x rw - tmpfs tmpfs rw", mountInfo{}, false},
		{`40 27 0:1 / /x\04 rw - tmpfs tmpfs rw`, mountInfo{}, false},
		{`40 27 0:1 / /x\999 rw - tmpfs tmpfs rw`, mountInfo{}, false},
		{"", mountInfo{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMountInfo(tt.line)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseMountInfo(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseMountInfo: any line parses or is refused without panicking,
// and a parsed mount point holds no escape the kernel would have written.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue")
	f.Add(`40 27 0:50 / /srv/a\040b rw - tmpfs tmpfs rw`)
	f.Add(`1 1 1:1 / \ - - - -`)
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := parseMountInfo(line)
		if !ok {
			return
		}
		if m.fsType == "" || m.source == "" {
			t.Errorf("parsed %q without a type or source: %+v", line, m)
		}
	})
}

// BenchmarkMeasure20000 is the soft walk of a workspace of 20,000 files
// (the default max_files) in 100 directories: what each soft turn pays,
// twice (docs/benchmarks.md).
func BenchmarkMeasure20000(b *testing.B) {
	ws := b.TempDir()
	manyFiles(b, ws)
	b.ResetTimer()
	for b.Loop() {
		u, err := measure(ws, 1<<30, 20000)
		if err != nil || u.files != 20000 {
			b.Fatalf("measure = %+v, %v", u, err)
		}
	}
}

// BenchmarkPrune20000 is a turn start's pruning of 20,000 outbox files of
// which none is old yet: the walk a turn pays when there is nothing to
// remove (docs/benchmarks.md).
func BenchmarkPrune20000(b *testing.B) {
	ws := b.TempDir()
	manyFiles(b, filepath.Join(ws, outboxName))
	cutoff := time.Now().Add(-7 * 24 * time.Hour)
	b.ResetTimer()
	for b.Loop() {
		if n, err := prune(ws, cutoff, maxPruneEntries); err != nil || n != 0 {
			b.Fatalf("prune = %d, %v", n, err)
		}
	}
}

// manyFiles makes 100 directories of 199 one-byte files under dir:
// 20,000 entries.
func manyFiles(b *testing.B, dir string) {
	b.Helper()
	for d := range 100 {
		sub := filepath.Join(dir, fmt.Sprint(d))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			b.Fatal(err)
		}
		for i := range 199 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprint(i)), []byte("x"), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// A channel whose image an earlier hard bound made is told about once in
// soft mode: the image is not mounted, so its files are not the worker's.
func TestDiskSoftWarnsOfUnusedImage(t *testing.T) {
	f := softFixture(t)
	root, err := f.rt.s.channelRoot("discord:was-hard")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, imageName), 1)
	for _, id := range []string{"a", "b"} {
		if _, err := f.turnIn(context.Background(), "discord:was-hard", id); err != nil {
			t.Fatal(err)
		}
	}
	recs := f.log.find("session workspace image of an earlier hard disk bound is not mounted in this mode; once unmounted, the channel's workspace is the directory beneath it")
	if len(recs) != 1 || recs[0].attrs["mode"] != "soft" {
		t.Errorf("records = %+v; want one", recs)
	}
}
