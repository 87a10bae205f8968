package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"golang.org/x/sys/unix"
)

// The hard bound's mount lifecycle on this host: these tests mount real
// loop devices, so they need root, /dev/loop-control and mke2fs. They
// skip without them, except under CI=true (CI runs as root), where the
// hard bound must be exercised. Run them through the shared lock:
//
//	CI=true flock /tmp/rtsandbox-docker.lock go test -race -p 1 ./session/
//
// Every test unmounts what it mounted and checks that no mount and no
// loop device of its party directory is left.

// needHard skips a test on a host without the hard bound, except in CI.
func needHard(t *testing.T) {
	t.Helper()
	if sup := ProbeDisk(); !sup.Hard {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the hard disk bound cannot be tested under CI=true: %s", sup.Reason)
		}
		t.Skip("the hard disk bound is unavailable:", sup.Reason)
	}
}

// hardOptions is the smallest hard bound: 64 MiB, 512 files.
func hardOptions() DiskOptions { return DiskOptions{Mode: DiskHard, SizeMB: 64, MaxFiles: 512} }

// hardFixture is a fixture with the hard bound whose party directory is
// left without mounts and loop devices.
func hardFixture(t *testing.T, edit ...func(*Options)) *fixture {
	t.Helper()
	needHard(t)
	f := newFixture(t, append([]func(*Options){func(o *Options) { o.Disk = hardOptions() }}, edit...)...)
	t.Cleanup(func() { noMountsLeft(t, f.party) })
	return f
}

// noMountsLeft unmounts what is still mounted under party (and fails the
// test when there was something), then waits for the loop devices of its
// images to clear.
func noMountsLeft(t *testing.T, party string) {
	t.Helper()
	if n, err := DetachAll(party); err != nil || n > 0 {
		t.Errorf("%d workspace mounts were left under %s (%v)", n, party, err)
	}
	mounts, _ := readMounts()
	for _, m := range mounts {
		if strings.HasPrefix(m.point, party+"/") {
			t.Errorf("mount left at %s", m.point)
			_ = unmount(m.point)
		}
	}
	if devs := loopsUnder(t, party, 5*time.Second); len(devs) > 0 {
		t.Errorf("loop devices left on images under %s: %v", party, devs)
	}
}

// loopsUnder waits up to wait for no loop device to be backed by a file
// under dir (a cleared loop device lets go asynchronously) and returns
// the ones that stayed.
func loopsUnder(t *testing.T, dir string, wait time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var devs []string
		paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dir+"/") {
				devs = append(devs, strings.TrimSpace(string(b)))
			}
		}
		if len(devs) == 0 || time.Now().After(deadline) {
			return devs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountAt returns the mount at path, failing the test when there is none.
func mountAt(t *testing.T, path string) mountInfo {
	t.Helper()
	mounts, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := lastMountAt(mounts, path)
	if !ok {
		t.Fatalf("nothing is mounted at %s", path)
	}
	return m
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	mounts, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	_, ok := lastMountAt(mounts, path)
	return ok
}

// firstTurn runs channel's first turn and returns its root and workspace.
func (f *fixture) firstTurn(t *testing.T, channel string) (root, ws string) {
	t.Helper()
	if _, err := f.turnIn(context.Background(), channel, "a"); err != nil {
		t.Fatalf("first turn = %v", err)
	}
	root, err := f.rt.s.channelRoot(rtsandbox.ChannelKey(channel))
	if err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, workspaceName)
}

// imageLabelOf returns the label of the channel's image.
func imageLabelOf(t *testing.T, root string) string {
	t.Helper()
	img, err := os.Open(filepath.Join(root, imageName))
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	label, err := readLabel(img)
	if err != nil {
		t.Fatal(err)
	}
	return label
}

func indexOf(calls []string, call string) int {
	for i, c := range calls {
		if c == call {
			return i
		}
	}
	return -1
}

// The mount lifecycle: the first turn makes the channel's image (0600,
// the service's, beside the workspace, sparse, of the configured size)
// and mounts it ext4 nosuid,nodev,noexec at the workspace, the
// filesystem's root the worker's, before the container is made; a
// restarted runtime reuses the mount and keeps the running container;
// Remove unmounts it and its loop device clears; the image keeps the
// workspace for the next turn, which mounts it again.
func TestDiskHardMountLifecycle(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	const ch = "discord:hard"
	root, ws := f.firstTurn(t, ch)
	m := mountAt(t, ws)
	if m.fsType != "ext4" || !hasOptions(m.options, "nosuid", "nodev", "noexec") {
		t.Errorf("workspace mount = %+v; want ext4 nosuid,nodev,noexec", m)
	}
	fi, err := os.Lstat(filepath.Join(root, imageName))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 64<<20 {
		t.Errorf("image = %v, %v; want a regular 0600 file of 64 MiB", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || st.Blocks*512 > 16<<20 {
		t.Errorf("image owner %d, %d bytes allocated; want ours, sparse", st.Uid, st.Blocks*512)
	}
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil || int(st.Uid) != f.opts.UID || int(st.Gid) != f.opts.GID || st.Mode&0o777 != 0o700 {
		t.Errorf("the filesystem's root = %+v, %v; want the worker's, 0700", st, err)
	}
	for _, name := range []string{sessionsName, attachmentName, outboxName} {
		if fi, err := os.Lstat(filepath.Join(ws, name)); err != nil || !fi.IsDir() {
			t.Errorf("%s in the mounted workspace = %v, %v", name, fi, err)
		}
	}
	calls := f.w.takeCalls()
	name := f.rt.name(ch)
	if r, c := indexOf(calls, "remove:"+name), indexOf(calls, "create"); r < 0 || c < r {
		t.Errorf("calls = %v; want the container removed before the mount and made after it", calls)
	}
	writeFile(t, filepath.Join(ws, sessionsName, "keep.jsonl"), 100)

	// A restarted host: a new runtime on the same party dir reuses the
	// mount (the same device) and the running container.
	if err := f.rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rt2, err := New(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	if _, err := rt2.Turn(ctx, TurnRequest{Binding: binding(ch, "b"), Text: "again", TurnID: "b"}); err != nil {
		t.Fatalf("turn after the restart = %v", err)
	}
	if m2 := mountAt(t, ws); m2.major != m.major || m2.minor != m.minor {
		t.Errorf("the restart mounted %d:%d; want the mount %d:%d reused", m2.major, m2.minor, m.major, m.minor)
	}
	if calls := f.w.takeCalls(); indexOf(calls, "create") >= 0 || len(removals(calls)) > 0 {
		t.Errorf("calls after the restart = %v; want the container kept", calls)
	}

	// Remove (owner off) unmounts; the loop device clears.
	if err := rt2.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
	if mounted(t, ws) {
		t.Error("the workspace is still mounted after Remove")
	}
	if devs := loopsUnder(t, f.party, 5*time.Second); len(devs) > 0 {
		t.Errorf("loop devices left after Remove: %v", devs)
	}
	if err := unix.Stat(ws, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Errorf("the directory beneath the mount = %+v, %v; want root's, 0700", st, err)
	}
	if _, err := rt2.Turn(ctx, TurnRequest{Binding: binding(ch, "c"), Text: "back", TurnID: "c"}); err != nil {
		t.Fatalf("turn after Remove = %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, sessionsName, "keep.jsonl")); err != nil {
		t.Errorf("the conversation did not survive the unmount: %v", err)
	}
	if err := rt2.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
}

// A host reboot (or anyone) unmounted the workspace while the channel's
// container runs: that container binds the directory beneath, so the next
// turn removes it before mounting and makes it anew. The host's own
// writes (AttachmentDir) mount the workspace first, too.
func TestDiskHardRemountRecreatesContainer(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	const ch = "discord:reboot"
	root, ws := f.firstTurn(t, ch)
	if ok, err := detachImage(root); err != nil || !ok {
		t.Fatalf("detachImage = %v, %v", ok, err)
	}
	f.w.takeCalls()
	dir, err := f.rt.AttachmentDir(ch)
	if err != nil || dir != filepath.Join(ws, attachmentName) {
		t.Fatalf("AttachmentDir = %q, %v", dir, err)
	}
	if !mounted(t, ws) {
		t.Error("AttachmentDir did not mount the workspace")
	}
	if calls := f.w.takeCalls(); len(removals(calls)) != 1 {
		t.Errorf("calls = %v; want the container that bound the directory beneath removed", calls)
	}
	if _, err := f.turnIn(ctx, ch, "b"); err != nil {
		t.Fatal(err)
	}
	if calls := f.w.takeCalls(); indexOf(calls, "create") < 0 {
		t.Errorf("calls = %v; want the container made anew", calls)
	}
	if err := f.rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
}

// [SEC] The image path is the host's: a link planted there (to a file of
// the right size or anywhere), a file of another mode, or a directory is
// refused, never followed, opened through or mounted.
func TestSecDiskImageRefused(t *testing.T) {
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, img, victim string)
	}{
		{"symlink", func(t *testing.T, img, victim string) {
			if err := os.Symlink(victim, img); err != nil {
				t.Fatal(err)
			}
		}},
		{"readable-by-others", func(t *testing.T, img, _ string) {
			writeFile(t, img, 64<<20)
			if err := os.Chmod(img, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, img, _ string) {
			if err := os.Mkdir(img, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := hardFixture(t)
			const ch = "discord:img"
			root, err := f.rt.s.channelRoot(ch)
			if err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(shortDir(t), "victim")
			if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, filepath.Join(root, imageName), victim)
			_, err = f.turnIn(context.Background(), ch, "a")
			if !errors.Is(err, ErrDiskMount) {
				t.Fatalf("turn = %v; want ErrDiskMount", err)
			}
			if b, _ := os.ReadFile(victim); string(b) != "victim" {
				t.Errorf("the link's target was written: %q", b)
			}
			if mounted(t, filepath.Join(root, workspaceName)) {
				t.Error("something was mounted")
			}
		})
	}
}

// A filesystem that is not the channel's image at the workspace (an
// operator's tmpfs) is refused, and Remove leaves it mounted.
func TestDiskHardForeignMountRefused(t *testing.T) {
	f := hardFixture(t)
	const ch = "discord:foreign"
	root, err := f.rt.s.channelRoot(ch)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, workspaceName)
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unmount(ws)
	if _, err := f.turnIn(context.Background(), ch, "a"); !errors.Is(err, ErrDiskMount) {
		t.Fatalf("turn = %v; want ErrDiskMount", err)
	}
	if err := f.rt.Remove(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	if m := mountAt(t, ws); m.fsType != "tmpfs" {
		t.Errorf("mount at the workspace = %+v; want the foreign tmpfs left alone", m)
	}
}

// A workspace from before the bound moves into the channel's new image:
// files, directories and links as they were; the directory beneath is
// emptied (the host's disk gets its space back).
func TestDiskHardMigratesWorkspace(t *testing.T) {
	needHard(t)
	f := newFixture(t) // no bound yet
	t.Cleanup(func() { noMountsLeft(t, f.party) })
	ctx := context.Background()
	const ch = "discord:migrate"
	_, ws := f.firstTurn(t, ch)
	writeFile(t, filepath.Join(ws, sessionsName, "s.jsonl"), 5000)
	writeFile(t, filepath.Join(ws, "work", "deep", "x.txt"), 10)
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "work", "link")); err != nil {
		t.Fatal(err)
	}
	f.rt.Close(ctx)
	opts := f.opts
	opts.Disk = hardOptions()
	rt, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	if _, err := rt.Turn(ctx, TurnRequest{Binding: binding(ch, "b"), Text: "bounded", TurnID: "b"}); err != nil {
		t.Fatalf("turn = %v", err)
	}
	if m := mountAt(t, ws); m.fsType != "ext4" {
		t.Fatalf("workspace mount = %+v", m)
	}
	if fi, err := os.Stat(filepath.Join(ws, sessionsName, "s.jsonl")); err != nil || fi.Size() != 5000 {
		t.Errorf("the conversation after the move = %v, %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(ws, "work", "link")); err != nil || target != "/etc/passwd" {
		t.Errorf("the link after the move = %q, %v; want it moved as a link", target, err)
	}
	if err := rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(ws); err != nil || len(entries) != 0 {
		t.Errorf("the directory beneath = %v, %v; want it emptied", entries, err)
	}
}

// A changed bound applies when the workspace is mounted next: while it
// is mounted the operator is told once; after an unmount the workspace
// moves into an image made for the new bound; a new bound too small for
// what the workspace holds keeps the earlier image, and says so.
func TestDiskHardBoundChange(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	const ch = "discord:change"
	root, ws := f.firstTurn(t, ch)
	writeFile(t, filepath.Join(ws, "work", "kept.txt"), 10)
	f.rt.Close(ctx)

	bigger := f.opts
	bigger.Disk = DiskOptions{Mode: DiskHard, SizeMB: 128, MaxFiles: 1024}
	log := &logSink{}
	bigger.Logger = slog.New(log)
	rt, err := New(bigger)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, id := range []string{"b", "c"} {
		if _, err := rt.Turn(ctx, TurnRequest{Binding: binding(ch, id), Text: "x", TurnID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if recs := log.find("session workspace keeps its earlier disk bound until it is unmounted (owner off, rtsandbox channels off, rtsandbox reap)"); len(recs) != 1 ||
		recs[0].attrs["image_bound"] != "r64-512" || recs[0].attrs["configured"] != "r128-1024" {
		t.Errorf("change records = %+v; want one", recs)
	}
	if err := rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Turn(ctx, TurnRequest{Binding: binding(ch, "d"), Text: "x", TurnID: "d"}); err != nil {
		t.Fatal(err)
	}
	if got := imageLabelOf(t, root); got != "r128-1024" {
		t.Errorf("image label = %q; want r128-1024", got)
	}
	if fi, err := os.Stat(filepath.Join(root, imageName)); err != nil || fi.Size() != 128<<20 {
		t.Errorf("image = %v, %v; want 128 MiB", fi, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "work", "kept.txt")); err != nil {
		t.Errorf("the workspace did not move: %v", err)
	}
	for _, left := range []string{newImageName, oldMountName} {
		if _, err := os.Lstat(filepath.Join(root, left)); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", left, err)
		}
	}

	// 600 entries do not fit a bound of 512 files: the image stays.
	for i := range 600 {
		writeFile(t, filepath.Join(ws, "many", fmt.Sprint(i)), 0)
	}
	if err := rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	smaller := f.opts
	smaller.Logger = slog.New(log)
	rt3, err := New(smaller)
	if err != nil {
		t.Fatal(err)
	}
	defer rt3.Close(ctx)
	if _, err := rt3.Turn(ctx, TurnRequest{Binding: binding(ch, "e"), Text: "x", TurnID: "e"}); err != nil {
		t.Fatal(err)
	}
	if got := imageLabelOf(t, root); got != "r128-1024" {
		t.Errorf("image label = %q; want the earlier image kept", got)
	}
	recs := log.find("session workspace mounted")
	if len(recs) == 0 || !strings.Contains(fmt.Sprint(recs[len(recs)-1].attrs["detail"]), "kept the image made for r128-1024") {
		t.Errorf("mount records = %+v; want the kept image noted", recs)
	}
	if err := rt3.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
}

// The hard bound holds on the host side too: writing past it fails with
// ENOSPC (entries past the file bound as well), the image holds no more
// than its size; a full workspace refuses the next turn with the fixed
// text, and fresh frees it.
func TestDiskHardFullRefusedAndFreed(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	const ch = "discord:full"
	root, ws := f.firstTurn(t, ch)
	big, err := os.Create(filepath.Join(ws, outboxName, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	written := 0
	for written < 256<<20 {
		n, err := big.Write(chunk)
		written += n
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write = %v; want ENOSPC", err)
			}
			break
		}
	}
	big.Close()
	if written > 64<<20 {
		t.Errorf("wrote %d bytes into a 64 MiB workspace", written)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, imageName), &st); err != nil || st.Blocks*512 > 64<<20 {
		t.Errorf("the image holds %d bytes of the host's disk (%v); want at most 64 MiB", st.Blocks*512, err)
	}
	if _, err := f.turnIn(ctx, ch, "b"); !errors.Is(err, rtsandbox.ErrWorkspaceFull) {
		t.Fatalf("turn in a full workspace = %v; want ErrWorkspaceFull", err)
	}
	if err := f.rt.StartFresh(ch); err != nil {
		t.Fatal(err)
	}
	if _, err := f.turnIn(ctx, ch, "c"); err != nil {
		t.Fatalf("turn after fresh = %v", err)
	}
	files := 0
	for ; files < 1024; files++ {
		if err := os.WriteFile(filepath.Join(ws, "work-"+fmt.Sprint(files)), nil, 0o600); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	if files >= 512 {
		t.Errorf("made %d files in a workspace of 512", files)
	}
	if err := f.rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
}

// The offline commands unmount what a stopped serve left: channels off
// one channel (only when its .channel-key names it), reap all.
func TestDiskDetachOffline(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	for _, ch := range []string{"discord:one", "discord:two", "discord:three"} {
		if _, err := f.turnIn(ctx, ch, "a"); err != nil {
			t.Fatal(err)
		}
	}
	f.rt.Close(ctx)
	if ok, err := DetachWorkspace(f.party, "discord_one:x"); err != nil || ok {
		t.Errorf("DetachWorkspace of an unknown channel = %v, %v", ok, err)
	}
	if ok, err := DetachWorkspace(f.party, "discord:one"); err != nil || !ok {
		t.Errorf("DetachWorkspace = %v, %v; want one unmounted", ok, err)
	}
	if n, err := DetachAll(f.party); err != nil || n != 2 {
		t.Errorf("DetachAll = %d, %v; want the other two", n, err)
	}
}

// BenchmarkHardImage is what a channel's first turn pays in hard mode
// for its workspace (a new sparse image, mke2fs, a loop device, the
// mount) and what a later mount of it costs, each with its unmount
// (docs/benchmarks.md). Root only.
func BenchmarkHardImage(b *testing.B) {
	if sup := ProbeDisk(); !sup.Hard {
		b.Skip("the hard disk bound is unavailable:", sup.Reason)
	}
	for _, size := range []int{64, 1024} {
		d := &disk{DiskOptions: DiskOptions{Mode: DiskHard, SizeMB: size, MaxFiles: min(20000, size*DiskFilesPerMB)}, uid: 1000, gid: 1000}
		root := b.TempDir()
		ws := filepath.Join(root, workspaceName)
		if err := os.Mkdir(ws, 0o700); err != nil {
			b.Fatal(err)
		}
		cycle := func(b *testing.B, fresh bool) {
			if fresh {
				os.Remove(filepath.Join(root, imageName))
			}
			if _, err := d.mountImage(context.Background(), root, ws); err != nil {
				b.Fatal(err)
			}
			if ok, err := detachImage(root); err != nil || !ok {
				b.Fatalf("detach = %v, %v", ok, err)
			}
		}
		b.Run(fmt.Sprintf("new-%dMiB", size), func(b *testing.B) {
			for b.Loop() {
				cycle(b, true)
			}
		})
		b.Run(fmt.Sprintf("again-%dMiB", size), func(b *testing.B) {
			for b.Loop() {
				cycle(b, false)
			}
		})
	}
}
