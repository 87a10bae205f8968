package sealed

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// Socket path rules (docs/protocol.md, "Where the worker finds the broker").
const (
	socketName     = "broker.sock"
	runDirPrefix   = "turn-"
	runDirSuffix   = 6
	maxSocketPath  = 100
	runDirOverhead = len("/"+runDirPrefix) + runDirSuffix + len("/"+socketName) // 24
	suffixAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// prepareRoots creates the run root (0700) when missing, canonicalises it
// and refuses a root that is not private to this service or too long for
// the socket path. Every step fails closed.
func (s *settings) prepareRoots() error {
	var err error
	if s.RunRoot, err = privateRoot("run root", s.RunRoot); err != nil {
		return err
	}
	if len(s.RunRoot)+runDirOverhead > maxSocketPath {
		return setupError("run root %q is longer than %d bytes", s.RunRoot, maxSocketPath-runDirOverhead)
	}
	return nil
}

// checkRoots repeats the ownership and mode check of the (canonical) run
// root: one Lstat, before every turn.
func (s *settings) checkRoots() error {
	if err := privdir.Check(s.RunRoot, s.procUID); err != nil {
		return fmt.Errorf("sandbox root: %w", err)
	}
	return nil
}

// privateRoot returns the canonical form of an operator root after
// creating it and checking it (privdir.Make: a directory owned by this
// service with no group or other bits, under parents nobody else can
// change).
func privateRoot(what, path string) (string, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) == "/" {
		return "", setupError("%s must be an absolute dedicated directory", what)
	}
	canon, err := privdir.Make(path) // "/" itself is never private
	if err != nil {
		return "", setupError("%s: %w", what, err)
	}
	return canon, nil
}

// owner is who the per-turn dirs and socket belong to.
type owner struct {
	chown    bool // hand them to uid:gid (the service runs as root)
	uid, gid int
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
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("sandbox run dir: %w", err)
		}
		if err := o.apply(dir, 0o700); err != nil {
			return "", errors.Join(fmt.Errorf("sandbox run dir: %w", err), os.RemoveAll(dir))
		}
		if len(socketPath(dir)) > maxSocketPath {
			return "", errors.Join(rtsandbox.ErrSocketPath, os.RemoveAll(dir))
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

// LockRunRoot takes the run root's exclusive lock without waiting, the
// lock a live Runtime holds for as long as it runs; an error wraps
// ErrRunRootBusy when another process holds it. Whoever removes a
// runtime's leftovers (reap) takes it first. Closing the file releases it.
func LockRunRoot(root string) (*os.File, error) {
	f, err := privdir.Lock(root)
	switch {
	case errors.Is(err, privdir.ErrLocked):
		return nil, fmt.Errorf("%w: %s", ErrRunRootBusy, root)
	case err != nil:
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
