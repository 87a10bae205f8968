package sandbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Socket path rules (spec §0.1, §5.6, §7.1 item 10).
const (
	socketName     = "broker.sock"
	runDirPrefix   = "turn-"
	runDirSuffix   = 6
	maxSocketPath  = 100
	runDirOverhead = len("/"+runDirPrefix) + runDirSuffix + len("/"+socketName) // 24
	suffixAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// prepareRoots creates both roots (0700) when missing, canonicalises them
// and refuses roots that are not private to this service, that nest, or a
// run root too long for the socket path. Every step fails closed.
func (s *settings) prepareRoots() error {
	var err error
	if s.RunRoot, err = privateRoot("run root", s.RunRoot, s.procUID); err != nil {
		return err
	}
	if s.WorkspaceRoot, err = privateRoot("workspace root", s.WorkspaceRoot, s.procUID); err != nil {
		return err
	}
	if nested(s.RunRoot, s.WorkspaceRoot) {
		return setupError("run and workspace roots must be separate directories")
	}
	if len(s.RunRoot)+runDirOverhead > maxSocketPath {
		return setupError("run root %q is longer than %d bytes", s.RunRoot, maxSocketPath-runDirOverhead)
	}
	return nil
}

// checkRoots repeats the ownership and mode check of both (canonical)
// roots: one Lstat each, before every turn.
func (s *settings) checkRoots() error {
	for _, root := range []string{s.RunRoot, s.WorkspaceRoot} {
		if err := checkPrivate(root, s.procUID); err != nil {
			return fmt.Errorf("sandbox root %s: %w", root, err)
		}
	}
	return nil
}

// privateRoot returns the canonical form of an operator root after creating
// it and checking that it is a directory owned by uid with no group or
// other permission bits.
func privateRoot(what, path string, uid int) (string, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return "", setupError("%s must be an absolute dedicated directory", what)
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return "", setupError("create %s: %w", what, err)
	}
	canon, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", setupError("resolve %s: %w", what, err)
	}
	if canon == "/" {
		return "", setupError("%s must be an absolute dedicated directory", what)
	}
	if err := checkPrivate(canon, uid); err != nil {
		return "", setupError("%s %s: %w", what, canon, err)
	}
	return canon, nil
}

// checkPrivate reports whether dir is a directory owned by uid with mode
// bits only for its owner.
func checkPrivate(dir string, uid int) error {
	st, err := ownedDir(dir, uid)
	if err != nil {
		return err
	}
	if st.Mode&0o077 != 0 {
		return fmt.Errorf("mode %#o has group or other bits", st.Mode&0o777)
	}
	return nil
}

// ownedDir requires dir to be a directory, not a link to one, owned by uid.
func ownedDir(dir string, uid int) (*syscall.Stat_t, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return nil, errors.New("not a directory")
	case !ok:
		return nil, errors.New("cannot read owner")
	case int(st.Uid) != uid:
		return nil, fmt.Errorf("owned by uid %d, not %d", st.Uid, uid)
	}
	return st, nil
}

// nested reports whether a and b are equal or one lies under the other.
func nested(a, b string) bool {
	under := func(x, y string) bool { return strings.HasPrefix(x, strings.TrimSuffix(y, "/")+"/") }
	return a == b || under(a, b) || under(b, a)
}

// workspaceName is the per-channel directory name: the full hex sha256 of
// the key's UTF-8 bytes, never derived from anything path-like.
func workspaceName(channel string) string {
	sum := sha256.Sum256([]byte(channel))
	return hex.EncodeToString(sum[:])
}

// owner is who the per-turn dirs and socket belong to.
type owner struct {
	chown    bool // hand them to uid:gid (the service runs as root)
	uid, gid int
}

// ensureWorkspace creates the channel's workspace (0700, handed to the
// worker) on first use. An existing one must be a real directory owned by
// the worker user (a workspace left by another sandbox.user is refused,
// never silently shared); its mode is set back to 0700, since the guest
// owns it and may have opened it up. Its contents are never touched.
func ensureWorkspace(root, channel string, o owner) (string, error) {
	dir := filepath.Join(root, workspaceName(channel))
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if err := checkWorkspace(dir, o); err != nil {
			return "", fmt.Errorf("sandbox workspace %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", fmt.Errorf("sandbox workspace: %w", err)
		}
		return dir, nil
	}
	if err != nil {
		return "", fmt.Errorf("sandbox workspace: %w", err)
	}
	if err := o.apply(dir, 0o700); err != nil {
		return "", fmt.Errorf("sandbox workspace: %w", err)
	}
	return dir, nil
}

// checkWorkspace requires an existing workspace to be a directory (not a
// link) owned by the worker user.
func checkWorkspace(dir string, o owner) error {
	if _, err := ownedDir(dir, o.uid); err != nil {
		return fmt.Errorf("%w (the worker is uid %d; was sandbox.user changed?)", err, o.uid)
	}
	return nil
}

// makeRunDir creates <root>/turn-XXXXXX with a fresh crypto/rand suffix,
// mode 0700, handed to the worker. The socket path must fit in 100 bytes;
// otherwise the dir is removed and the turn fails.
func makeRunDir(root string, o owner) (string, error) {
	for range 100 {
		suffix, err := randomSuffix()
		if err != nil {
			return "", err
		}
		dir := filepath.Join(root, runDirPrefix+suffix)
		err = os.Mkdir(dir, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("sandbox run dir: %w", err)
		}
		if err := o.apply(dir, 0o700); err != nil {
			return "", errors.Join(fmt.Errorf("sandbox run dir: %w", err), os.RemoveAll(dir))
		}
		if len(socketPath(dir)) > maxSocketPath {
			return "", errors.Join(ErrSocketPath, os.RemoveAll(dir))
		}
		return dir, nil
	}
	return "", errors.New("sandbox run dir: no free name")
}

func socketPath(runDir string) string { return filepath.Join(runDir, socketName) }

// randomSuffix returns six characters of [A-Za-z0-9], unbiased.
func randomSuffix() (string, error) {
	out := make([]byte, 0, runDirSuffix)
	var buf [16]byte
	for len(out) < runDirSuffix {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("sandbox run dir name: %w", err)
		}
		for _, b := range buf {
			// 248 = 4·62: reject the tail so every character is equally likely.
			if b < 248 && len(out) < runDirSuffix {
				out = append(out, suffixAlphabet[int(b)%len(suffixAlphabet)])
			}
		}
	}
	return string(out), nil
}

// apply sets mode explicitly (umask must not matter) and, when the service
// is root, hands path to the worker user so the non-root worker can reach
// it. Neither step is best effort.
func (o owner) apply(path string, mode os.FileMode) error {
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	if o.chown {
		return os.Lchown(path, o.uid, o.gid)
	}
	return nil
}

// One runtime owns a run root at a time: two processes on one state
// directory (serve and turn, say) would otherwise run two containers on
// one channel's workspace at once, and the startup sweep below could
// remove a live turn's run dir. The lock is a flock on the run root
// directory itself, so the root holds nothing but run dirs.

// ErrRunRootBusy marks a run root another runtime holds.
var ErrRunRootBusy = errors.New("sandbox: the run root is in use by another rtsandbox process")

// lockRunRoot takes the run root's exclusive lock without waiting.
func lockRunRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(root, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, setupError("run root lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrRunRootBusy, root)
		}
		return nil, setupError("run root lock: %w", err)
	}
	return f, nil
}

// sweepRunRoot removes run dirs a crashed process left behind. It runs
// under the run root's lock, so no live turn owns them.
func sweepRunRoot(root string) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return setupError("read run root: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, runDirPrefix) || len(name) != len(runDirPrefix)+runDirSuffix {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			return setupError("remove stale run dir %s: %w", name, err)
		}
	}
	return nil
}
