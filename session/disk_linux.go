package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The hard bound on Linux: an ext4 image per channel, loop-mounted at its
// workspace. The loop device and the mount are made with ioctl(2) and
// mount(2) directly (golang.org/x/sys/unix); only the filesystem itself is
// made by mke2fs, since no Go library writes ext4 (its journal, inode
// tables, group descriptors and checksums) well enough to trust with a
// guest's data, and e2fsprogs is on every Linux host that has ext4.

// Names in the host-only channel root besides imageName.
const (
	newImageName = "workspace.img.new" // a remade image, while the workspace moves into it
	oldMountName = ".workspace-old"    // where the earlier image is mounted meanwhile
)

const (
	ext4Magic = 0xEF53
	// mountFlags: nothing in a guest's workspace is a device, a set-id
	// program or, for the host, a program at all.
	mountFlags   = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME
	mountData    = "errors=remount-ro" // the host's disk full under a sparse image: stop writing, keep what is there
	mkfsTimeout  = 2 * time.Minute
	maxMountInfo = 16 << 20
	maxProcFile  = 64 << 10
)

// probeDisk is ProbeDisk for a process running as euid.
func probeDisk(euid int) DiskSupport {
	if euid != 0 {
		return DiskSupport{Reason: "rtsandbox does not run as root, and mounting a filesystem needs root"}
	}
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return DiskSupport{Reason: "no loop device: /dev/loop-control: " + err.Error()}
	}
	unix.Close(fd)
	if _, err := mke2fsPath(); err != nil {
		return DiskSupport{Reason: err.Error()}
	}
	if !kernelHasExt4() {
		return DiskSupport{Reason: "the kernel lists no ext4 filesystem in /proc/filesystems (load it: modprobe ext4)"}
	}
	return DiskSupport{Hard: true, Reason: "root, /dev/loop-control, mke2fs and ext4 are available"}
}

// mke2fsPath finds mke2fs in PATH or the usual sbin directories (a
// service's PATH may lack them).
func mke2fsPath() (string, error) {
	if p, err := exec.LookPath("mke2fs"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mke2fs", "/sbin/mke2fs"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mke2fs is not installed in PATH, /usr/sbin or /sbin (install e2fsprogs)")
}

func kernelHasExt4() bool {
	data, err := readProc("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(strings.TrimPrefix(line, "nodev")) == "ext4" {
			return true
		}
	}
	return false
}

// readProc reads a small kernel file.
func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxProcFile))
}

// readMounts lists this process's mounts.
func readMounts() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMountInfo))
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	for _, line := range strings.Split(string(data), "\n") {
		if m, ok := parseMountInfo(line); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// openImage opens the image name in the channel root rootfd: no link
// (openAt refuses one), a regular file of this service, private (no group
// or other bits). nil when there is none.
func openImage(rootfd int, name string) (*os.File, error) {
	fd, err := openAt(rootfd, name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: workspace image %s: %w", ErrDiskMount, name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		int(st.Uid) != unix.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: workspace image %s is not a private regular file of this service", ErrDiskMount, name)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readLabel reads an image's ext4 superblock: the magic must be ext4's
// (the family's), the label is the bound the image was made for.
func readLabel(img *os.File) (string, error) {
	var sb [136]byte
	if _, err := img.ReadAt(sb[:], 1024); err != nil {
		return "", fmt.Errorf("workspace image superblock: %w", err)
	}
	if binary.LittleEndian.Uint16(sb[56:]) != ext4Magic {
		return "", errors.New("workspace image holds no ext4 filesystem")
	}
	return string(bytes.TrimRight(sb[120:136], "\x00")), nil
}

// createImage makes the image name in rootfd: created exclusively, 0600,
// sparse, then mke2fs. A failed image is removed.
func (d *disk) createImage(ctx context.Context, rootfd int, name string) (*os.File, error) {
	fd, err := openAt(rootfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create workspace image: %w", err)
	}
	img := os.NewFile(uintptr(fd), name)
	if err = img.Truncate(d.maxBytes()); err == nil {
		err = d.mkfs(ctx, img)
	}
	if err != nil {
		img.Close()
		_ = unix.Unlinkat(rootfd, name, 0)
		return nil, err
	}
	return img, nil
}

// mkfs makes the filesystem: 4 KiB blocks, MaxFiles inodes, no blocks
// reserved for root, the root directory the worker's, the bound as its
// label. The image is a new sparse file, which reads as zeros: mke2fs
// "discards" it (punches holes, the default) and so knows its inode
// tables need no zeroing, now or by the kernel after the mount, and the
// journal is not zeroed either (lazy_journal_init: there is no stale
// journal to replay in a file that was never written). So a new image
// takes under 1 MiB of the host's disk and grows as the worker writes.
// mke2fs gets the image as a descriptor, never a path.
func (d *disk) mkfs(ctx context.Context, img *os.File) error {
	bin, err := mke2fsPath()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, mkfsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-q", "-F", "-t", "ext4", "-b", "4096", "-N", strconv.Itoa(d.MaxFiles), "-m", "0",
		"-L", d.imageLabel(), "-E", fmt.Sprintf("root_owner=%d:%d,lazy_journal_init=1", d.uid, d.gid),
		"/proc/self/fd/3")
	cmd.ExtraFiles = []*os.File{img}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	out := &boundedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mke2fs: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// loopDevice is the loop device of the block device major:minor
// ("/dev/loopN"), from sysfs.
func loopDevice(major, minor uint32) (string, error) {
	data, err := readProc(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", major, minor))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, ok := strings.CutPrefix(line, "DEVNAME=")
		if ok && strings.HasPrefix(name, "loop") && validEntry(name) {
			return "/dev/" + name, nil
		}
	}
	return "", fmt.Errorf("block device %d:%d is not a loop device", major, minor)
}

// backs reports whether the loop device dev has img as its backing file
// (the same device and inode, from LOOP_GET_STATUS64).
func backs(dev string, img *os.File) (bool, error) {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return false, nil // not bound to a file
	}
	if err != nil {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return false, err
	}
	return info.Device == st.Dev && info.Inode == st.Ino, nil
}

// loopBacking is the loop device already bound to img ("" when none): an
// image a container's mount still holds must not get a second device, so
// that one filesystem is never mounted from two.
func loopBacking(img *os.File) (string, error) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "loop") {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", name, "loop", "backing_file")); err != nil {
			continue
		}
		if ok, err := backs("/dev/"+name, img); err == nil && ok {
			return "/dev/" + name, nil
		}
	}
	return "", nil
}

// attachLoop binds img to a free loop device, which clears itself when
// its last user (the mount) goes (LO_FLAGS_AUTOCLEAR). The returned
// descriptor keeps it bound until the caller mounted it and closes it.
func attachLoop(img *os.File) (string, int, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	defer unix.Close(ctl)
	for range 16 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("no free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], imageName)
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) { // before Linux 5.8
			if err = unix.IoctlSetInt(fd, unix.LOOP_SET_FD, int(img.Fd())); err == nil {
				err = unix.IoctlLoopSetStatus64(fd, &cfg.Info)
			}
		}
		if err == nil {
			return dev, fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EBUSY) { // EBUSY: another process took it first
			return "", -1, fmt.Errorf("bind %s: %w", dev, err)
		}
	}
	return "", -1, errors.New("no free loop device after 16 tries")
}

// attachMount mounts img at target (a canonical directory of the host).
func attachMount(img *os.File, target string) error {
	dev, err := loopBacking(img)
	if err != nil {
		return err
	}
	if dev == "" {
		var fd int
		if dev, fd, err = attachLoop(img); err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	t, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: mount point: %w", ErrSymlink, err)
	}
	defer unix.Close(t)
	// The descriptor's magic link is the very directory opened without
	// following a link; a path could be swapped meanwhile.
	if err := unix.Mount(dev, "/proc/self/fd/"+strconv.Itoa(t), "ext4", mountFlags, mountData); err != nil {
		return fmt.Errorf("mount the workspace image: %w", err)
	}
	return nil
}

func unmount(path string) error {
	return unix.Unmount(path, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
}

// ours explains why the mount m is not img's, or nil when it is:
// ext4 from a loop device backed by img, nosuid, nodev and noexec.
func ours(m mountInfo, img *os.File) error {
	if m.fsType != "ext4" {
		return fmt.Errorf("a %s filesystem is mounted there", m.fsType)
	}
	if !hasOptions(m.options, "nosuid", "nodev", "noexec") {
		return fmt.Errorf("it is mounted %s, without nosuid,nodev,noexec", m.options)
	}
	dev, err := loopDevice(m.major, m.minor)
	if err != nil {
		return err
	}
	if ok, err := backs(dev, img); err != nil || !ok {
		return fmt.Errorf("%s is not backed by the channel's image (%v)", dev, err)
	}
	return nil
}

// currentImage reports whether the channel's image is what is mounted at
// ws, and the bound it was made for. Nothing mounted is (false, nil);
// anything else mounted there is ErrDiskMount. What an interrupted remake
// left is undone first.
func currentImage(root, ws string) (string, bool, error) {
	rootfd, err := openDir(root)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrRootSymlink, err)
	}
	defer unix.Close(rootfd)
	if err := undoRemake(rootfd, root); err != nil {
		return "", false, err
	}
	mounts, err := readMounts()
	if err != nil {
		return "", false, err
	}
	m, found := lastMountAt(mounts, ws)
	if !found {
		return "", false, nil
	}
	img, err := openImage(rootfd, imageName)
	if err != nil {
		return "", false, err
	}
	if img == nil {
		return "", false, fmt.Errorf("%w: a filesystem is mounted at %s, but the channel has no workspace image", ErrDiskMount, ws)
	}
	defer img.Close()
	if err := ours(m, img); err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrDiskMount, ws, err)
	}
	label, err := readLabel(img)
	return label, err == nil, err
}

// undoRemake undoes what a remake interrupted by a crash left: the new
// image mounted at the workspace and the earlier one beside it. The
// earlier image is still the channel's; the remake runs again.
func undoRemake(rootfd int, root string) error {
	img, err := openImage(rootfd, newImageName)
	if err != nil || img == nil {
		return err
	}
	defer img.Close()
	if _, err := unmountOurs(filepath.Join(root, workspaceName), img); err != nil {
		return err
	}
	if old, err := openImage(rootfd, imageName); err == nil && old != nil {
		_, err = unmountOurs(filepath.Join(root, oldMountName), old)
		old.Close()
		if err != nil {
			return err
		}
	}
	return unix.Unlinkat(rootfd, newImageName, 0)
}

// unmountOurs unmounts img from path as often as it is mounted there on
// top; a mount that is not img's stays.
func unmountOurs(path string, img *os.File) (bool, error) {
	done := false
	for range 4 {
		mounts, err := readMounts()
		if err != nil {
			return done, err
		}
		m, ok := lastMountAt(mounts, path)
		if !ok || ours(m, img) != nil {
			return done, nil
		}
		if err := unmount(path); err != nil {
			return done, fmt.Errorf("unmount %s: %w", path, err)
		}
		done = true
	}
	return done, nil
}

// detachImage unmounts the channel's image under root from its
// workspace (and from where a remake put it). The loop device clears
// itself once the last mount, a container's included, is gone.
func detachImage(root string) (bool, error) {
	rootfd, err := openDir(root)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrRootSymlink, err)
	}
	defer unix.Close(rootfd)
	if err := undoRemake(rootfd, root); err != nil {
		return false, err
	}
	img, err := openImage(rootfd, imageName)
	if err != nil || img == nil {
		return false, err
	}
	defer img.Close()
	return unmountOurs(filepath.Join(root, workspaceName), img)
}

// mountedRoots are the channel roots under party whose workspace has
// something mounted.
func mountedRoots(party string) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var roots []string
	seen := map[string]bool{}
	for _, m := range mounts {
		root, name := filepath.Split(m.point)
		root = filepath.Clean(root)
		if (name == workspaceName || name == oldMountName) && filepath.Dir(root) == party && !seen[root] {
			seen[root] = true
			roots = append(roots, root)
		}
	}
	return roots, nil
}

// mountImage mounts the channel's image at ws, where nothing is mounted
// (see attachWorkspace), and says what it did. The directory beneath the
// mount becomes root's (0700), so a container that ever binds it instead
// of the filesystem (a host reboot restarts a container before rtsandbox
// mounts anything) cannot write there. Without an image, one is made and
// what the directory held (a workspace from before the bound) moves into
// it; an image made for another bound is remade (remake).
func (d *disk) mountImage(ctx context.Context, root, ws string) (string, error) {
	rootfd, err := openDir(root)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRootSymlink, err)
	}
	defer unix.Close(rootfd)
	under, err := openDir(ws)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(under)
	if err := unix.Fchown(under, 0, 0); err != nil {
		return "", err
	}
	if err := unix.Fchmod(under, 0o700); err != nil {
		return "", err
	}
	img, err := openImage(rootfd, imageName)
	if err != nil {
		return "", err
	}
	if img == nil {
		return d.newImage(ctx, rootfd, ws, under)
	}
	defer img.Close()
	have, err := readLabel(img)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDiskMount, err)
	}
	if have != d.imageLabel() {
		return d.remake(ctx, rootfd, root, ws, img, have)
	}
	return "mounted the channel's image", attachMount(img, ws)
}

// newImage makes the channel's first image, mounts it at ws and moves
// what the directory beneath (under) held into it. A workspace that does
// not fit the bound is refused, and the image removed: the channel keeps
// failing, with this reason, until the bound is raised or the directory
// emptied.
func (d *disk) newImage(ctx context.Context, rootfd int, ws string, under int) (string, error) {
	img, err := d.mountNew(ctx, rootfd, imageName, ws)
	if err != nil {
		return "", err
	}
	defer img.Close()
	n, err := moveInto(under, ws)
	if err != nil {
		_ = unmount(ws)
		_ = unix.Unlinkat(rootfd, imageName, 0)
		return "", fmt.Errorf("%w: the channel's workspace from before the bound does not fit session.disk (%d MiB, %d files); raise the bound or empty %s: %w",
			ErrDiskMount, d.SizeMB, d.MaxFiles, ws, err)
	}
	return fmt.Sprintf("made the channel's image (%s); moved %d entries of the workspace into it", d.imageLabel(), n), nil
}

// mountNew makes the image name in rootfd and mounts it at ws; an image
// that does not mount is removed.
func (d *disk) mountNew(ctx context.Context, rootfd int, name, ws string) (*os.File, error) {
	img, err := d.createImage(ctx, rootfd, name)
	if err != nil {
		return nil, err
	}
	if err := attachMount(img, ws); err != nil {
		img.Close()
		_ = unix.Unlinkat(rootfd, name, 0)
		return nil, err
	}
	return img, nil
}

// moveInto copies the entries of the directory under into the filesystem
// mounted at ws, then removes them from under, and returns how many
// top-level entries moved.
func moveInto(under int, ws string) (int, error) {
	var names []string
	if err := eachEntry(under, func(name string, _ *unix.Stat_t) (bool, error) {
		names = append(names, name)
		return true, nil
	}); err != nil || len(names) == 0 {
		return 0, err
	}
	to, err := openDir(ws)
	if err != nil {
		return 0, err
	}
	defer unix.Close(to)
	if err := copyTree(under, to, 1); err != nil {
		return 0, err
	}
	for _, name := range names {
		if _, err := removeEntry(under, name); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}

// remake moves the workspace from an image made for another bound into a
// new one: the new image is mounted at ws, the earlier one beside it,
// everything is copied, and the new image takes the earlier one's name.
// When the workspace does not fit the new bound, the earlier image stays
// (and is mounted at ws) and the note says so.
func (d *disk) remake(ctx context.Context, rootfd int, root, ws string, old *os.File, have string) (string, error) {
	nimg, err := d.mountNew(ctx, rootfd, newImageName, ws)
	if err != nil {
		return "", err
	}
	defer nimg.Close()
	if cerr := copyImage(rootfd, filepath.Join(root, oldMountName), old, ws); cerr != nil {
		_ = unmount(ws)
		_ = unix.Unlinkat(rootfd, newImageName, 0)
		if err := attachMount(old, ws); err != nil {
			return "", err
		}
		return fmt.Sprintf("kept the image made for %s: the workspace does not fit %s (%v)", have, d.imageLabel(), cerr), nil
	}
	if err := unix.Renameat(rootfd, newImageName, rootfd, imageName); err != nil {
		return "", fmt.Errorf("replace the workspace image: %w", err)
	}
	return fmt.Sprintf("moved the workspace from an image made for %s into one made for %s", have, d.imageLabel()), nil
}

// copyImage mounts old at dir (made 0700 in the channel root) and copies
// its content into the filesystem mounted at ws.
func copyImage(rootfd int, dir string, old *os.File, ws string) error {
	if err := unix.Mkdirat(rootfd, oldMountName, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if !canonical(dir) {
		return ErrSymlink
	}
	if err := attachMount(old, dir); err != nil {
		return err
	}
	defer func() {
		_ = unmount(dir)
		_ = unix.Unlinkat(rootfd, oldMountName, unix.AT_REMOVEDIR)
	}()
	from, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	to, err := openDir(ws)
	if err != nil {
		return err
	}
	defer unix.Close(to)
	return copyTree(from, to, 1)
}

// renameNoReplace renames without replacing an entry that is there.
func renameNoReplace(olddir int, oldname string, newdir int, newname string) error {
	return unix.Renameat2(olddir, oldname, newdir, newname, unix.RENAME_NOREPLACE)
}
