package container

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Spec is the hardening profile of one sealed turn's container, as data.
// Everything not listed here is fixed by the engine: no network, read-only
// root, all capabilities dropped, no-new-privileges, nofile 256:256, a
// noexec 64 MiB /tmp, HOME=/tmp/home and no logs. Validate it before use;
// engines validate it again after canonicalising the mount paths.
type Spec struct {
	// Name is the exact container name, used for every removal. Build it
	// with Name(channelKey).
	Name string
	// Image is a local image reference; it is never pulled.
	Image string
	// UID and GID run the worker; both must be > 0 and should equal the
	// service's own ids so the workspace stays the service's.
	UID, GID int
	// RunDir is the broker endpoint: a dedicated host directory that
	// holds the turn's broker socket (broker.sock). The worker may read
	// it, never write it. Docker binds it read-only at /broker; an engine
	// whose workers cannot share the host's filesystem relays the socket
	// instead (docs/engines.md).
	RunDir string
	// WorkspaceDir, when set, is mounted read-write at /workspace. When it
	// is empty (the sealed mode), /workspace is a private tmpfs of
	// Limits.WorkspaceMB with at most WorkspaceInodes files, owned by
	// UID:GID, noexec, that dies with the container: nothing the guest
	// writes there outlives the turn.
	WorkspaceDir string
	Limits       Limits
	// Labels are set on the container; TurnLabels gives the ones Reap uses.
	Labels map[string]string
	// Runtime is the OCI runtime the worker runs under: RuntimeRunc (or
	// "") or RuntimeRunsc (runtime.go).
	Runtime string
}

// Limits bounds the container's resources. There are no upper bounds beyond
// what the engine's integer fields can carry.
type Limits struct {
	MemoryMB int     // memory and memory+swap, in MiB; at least 64
	CPUs     float64 // CPU quota; finite and > 0
	PIDs     int     // process and thread limit; at least 8
	// WorkspaceMB sizes the tmpfs /workspace of a Spec without a
	// WorkspaceDir: 1..MemoryMB (tmpfs pages count against the memory
	// limit anyway; the cap makes a full workspace fail a write, not the
	// worker).
	WorkspaceMB int
}

// DefaultLimits are the reference defaults (512 MiB, 1 CPU, 64 PIDs) and
// a 64 MiB workspace.
func DefaultLimits() Limits { return Limits{MemoryMB: 512, CPUs: 1, PIDs: 64, WorkspaceMB: 64} }

// WorkspaceInodes bounds the files and directories of a tmpfs workspace.
const WorkspaceInodes = 4096

// Labels that mark this installation's turn containers, so Reap can find
// leftovers after a daemon hiccup or a host crash.
const (
	InstallationLabel = "rtsandbox.installation"
	RoleLabel         = "rtsandbox.role"
	RoleTurn          = "turn"
)

// NamePrefix starts every turn container's name. The reference uses
// "roundtable-sandbox-"; rtsandbox uses its own product name with the same
// shape.
const NamePrefix = "rtsandbox-"

var (
	nameRE         = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,90}$`)
	installationRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	labelKeyRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
)

// specError is a Validate refusal: its text is the reference message and it
// matches ErrInvalidSpec.
type specError string

func (e specError) Error() string        { return string(e) }
func (e specError) Is(target error) bool { return target == ErrInvalidSpec }

// The refusal texts of the reference argument builder (docs/sealed-turn.md, "The container").
const (
	errNameOrImage  = specError("invalid container name or image")
	errRootUser     = specError("sandbox requires a non-root user and group")
	errMountPath    = specError("mount paths must be absolute dedicated directories")
	errMountsShared = specError("broker and workspace mounts must be separate")
	errLimits       = specError("invalid resource limits")
	errLabels       = specError("invalid container labels")
	errInstallation = specError("invalid installation id")
	errRuntime      = specError("invalid container runtime")
)

// Validate reports the first rule s breaks, as an error matching
// ErrInvalidSpec whose text is the reference message.
func (s Spec) Validate() error {
	switch {
	case !validName(s.Name) || !validImage(s.Image):
		return errNameOrImage
	case s.UID <= 0 || s.GID <= 0:
		return errRootUser
	case !validMountPath(s.RunDir) || (s.WorkspaceDir != "" && !validMountPath(s.WorkspaceDir)):
		return errMountPath
	case s.WorkspaceDir != "" && nested(s.RunDir, s.WorkspaceDir):
		return errMountsShared
	case !s.Limits.valid():
		return errLimits
	case !validLabels(s.Labels):
		return errLabels
	case !ValidRuntime(s.Runtime):
		return errRuntime
	}
	return nil
}

// validName applies the reference regex and, stricter, refuses names made
// only of hex digits: the engine resolves a reference it cannot find by name
// as an id prefix, so removing an all-hex name that is already gone could
// force-remove an unrelated container.
func validName(name string) bool {
	return nameRE.MatchString(name) && strings.Trim(name, "0123456789abcdef") != ""
}

// validImage refuses what could be read as a CLI flag or split into extra
// arguments, as the reference does. JS \s also covers U+FEFF.
func validImage(image string) bool {
	if image == "" || strings.HasPrefix(image, "-") {
		return false
	}
	return !strings.ContainsFunc(image, func(r rune) bool {
		return unicode.IsSpace(r) || r == '\uFEFF' || r == 0
	})
}

// validMountPath keeps mount sources absolute and dedicated. Commas and line
// breaks are refused because they would inject options into a CLI --mount
// value; the API does not parse them, but the rule stays so that any driver
// may rely on it. Paths must also be clean (stricter than the reference) so
// the nesting check below compares canonical strings.
func validMountPath(p string) bool {
	return filepath.IsAbs(p) && p != "/" && filepath.Clean(p) == p &&
		!strings.ContainsAny(p, ",\n\r\x00")
}

// nested reports whether the two mounts are the same directory or one lies
// inside the other, which would let the guest reach the broker directory
// read-write (or the workspace through /broker).
func nested(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// maxMemoryMB keeps MemoryMB << 20 inside int64; maxNanoCPUs keeps
// CPUs * 1e9 inside int64 with room to spare.
const (
	maxMemoryMB = math.MaxInt64 >> 20
	maxNanoCPUs = 1 << 62
)

// valid applies the reference bounds. Beyond them, a CPU quota that rounds
// to zero nanoCPUs is refused, because the engine reads 0 as "no limit".
func (l Limits) valid() bool {
	if l.MemoryMB < 64 || l.MemoryMB > maxMemoryMB || l.PIDs < 8 {
		return false
	}
	if l.WorkspaceMB < 1 || l.WorkspaceMB > l.MemoryMB {
		return false
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs <= 0 {
		return false
	}
	n := math.Round(l.CPUs * 1e9)
	return n >= 1 && n <= maxNanoCPUs
}

// NanoCPUs is the engine's CPU quota for l.CPUs.
func (l Limits) NanoCPUs() int64 { return int64(math.Round(l.CPUs * 1e9)) }

// MemoryBytes is the engine's memory limit for l.MemoryMB.
func (l Limits) MemoryBytes() int64 { return int64(l.MemoryMB) << 20 }

// validLabels keeps label keys to a plain dotted namespace and refuses
// control characters in values, so labels cannot smuggle log lines.
func validLabels(labels map[string]string) bool {
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) || len(v) > 256 ||
			strings.ContainsFunc(v, unicode.IsControl) {
			return false
		}
	}
	return true
}

// ValidInstallation reports whether id can name an installation in labels:
// ^[a-z0-9][a-z0-9_.-]{0,62}$.
func ValidInstallation(id string) bool { return installationRE.MatchString(id) }

// TurnLabels returns the labels of a turn container of this installation.
// Errors: ErrInvalidSpec when the id is not ValidInstallation.
func TurnLabels(installation string) (map[string]string, error) {
	if !ValidInstallation(installation) {
		return nil, errInstallation
	}
	return map[string]string{InstallationLabel: installation, RoleLabel: RoleTurn}, nil
}

// Name returns a fresh container name for a turn in the channel:
// "rtsandbox-" + the first 16 hex digits of sha256(channelKey) + "-" + 8
// random hex digits. The hash groups a channel's containers for the operator
// without revealing the key; the random part keeps names unique per turn.
func Name(channelKey string) string {
	sum := sha256.Sum256([]byte(channelKey))
	var r [4]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (it crashes instead)
	return NamePrefix + hex.EncodeToString(sum[:8]) + "-" + hex.EncodeToString(r[:])
}

// PoolName is the name of a warm pool's worker: NamePrefix, "warm-" and
// 16 random hex digits. Unlike Name it hashes no channel: a pooled
// container carries nothing of the turn it will serve before its claim.
func PoolName() string {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (it crashes instead)
	return NamePrefix + "warm-" + hex.EncodeToString(r[:])
}
