package container

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The session container (docs/session.md, "The container"): one long-lived worker per
// channel, running the same FROM-scratch worker image as the sealed mode
// with the command ["session"]. Unlike a sealed turn's container it keeps
// running between turns (restart policy unless-stopped), it has a
// read-write /workspace bind mount that outlives it, and its logs go to a
// log driver so that the last lines can be saved before an aborted turn
// removes it. What stays the same: no network, a read-only root, no
// capabilities, no-new-privileges, a non-root user, exactly two binds and
// no credential anywhere (env, labels, mounts).

// RoleSession is the RoleLabel value of session containers. Reap removes
// only RoleTurn containers, so the sealed reaper never touches a channel's
// long-lived worker.
const RoleSession = "session"

// Labels of a session container besides InstallationLabel and RoleLabel.
// ProfileLabel is what Status reads back to decide a recreate;
// SpecLabel carries SessionSpec.Digest, so any change of the create body
// (image, user, limits, time zone, log driver) recreates the container.
const (
	ChannelLabel = "rtsandbox.channel"
	ProfileLabel = "rtsandbox.profile"
	SpecLabel    = "rtsandbox.session-spec"
)

// DefaultSessionPrefix starts every session container's name unless the
// operator names another prefix (config session.container_prefix).
const DefaultSessionPrefix = "rtsandbox-session"

// SessionNamePrefix starts every session container's name under
// DefaultSessionPrefix.
const SessionNamePrefix = DefaultSessionPrefix + "-"

// SessionCommand is the worker's command after the image's ENTRYPOINT.
const SessionCommand = "session"

// Session container states (Status). Running means the worker's process
// runs and can answer: a paused container, or one Docker is restarting
// after its process exited, is stopped.
const (
	StateMissing = "missing"
	StateRunning = "running"
	StateStopped = "stopped"
)

// ErrSessionDown marks a session container that stopped serving its
// channel: its process exited (killed, crashed, OOM-killed), or it was
// removed, paused or restarted. LongLived.Watch reports it for the
// container it watches, and refuses to watch one that is not running. It
// is a rtsandbox.ErrSandboxStopped, so the turn it cut gets that text.
var ErrSessionDown = fmt.Errorf("%w: session container down", rtsandbox.ErrSandboxStopped)

// SessionTmpfs is the session container's /tmp: 512 MiB as the reference,
// and noexec (stricter: the FROM-scratch worker execs nothing).
const SessionTmpfs = "rw,noexec,nosuid,nodev,size=512m,mode=1777"

// SessionLimits bounds a session container's resources.
type SessionLimits struct {
	MemoryMB int     // memory and memory+swap (no swap), in MiB; at least 64
	CPUs     float64 // CPU quota; finite and > 0
	PIDs     int     // process and thread limit; at least 8
}

// DefaultSessionLimits are the reference's session defaults: 1.5 GiB, one
// CPU, 256 PIDs.
func DefaultSessionLimits() SessionLimits {
	return SessionLimits{MemoryMB: 1536, CPUs: 1, PIDs: 256}
}

func (l SessionLimits) limits() Limits {
	return Limits{MemoryMB: l.MemoryMB, CPUs: l.CPUs, PIDs: l.PIDs, WorkspaceMB: 1}
}

// NanoCPUs is the engine's CPU quota.
func (l SessionLimits) NanoCPUs() int64 { return l.limits().NanoCPUs() }

// MemoryBytes is the engine's memory (and memory+swap) limit.
func (l SessionLimits) MemoryBytes() int64 { return l.limits().MemoryBytes() }

// LogConfig is the session container's log driver and its options. The
// reference defaults to journald, which fails to start containers on a
// daemon that does not run under systemd with journald; our default is
// DefaultLogConfig (the "local" driver, which every daemon since 18.09
// has and `docker logs` reads).
type LogConfig struct {
	Driver  string
	Options map[string]string
}

// DefaultLogConfig is the "local" driver with 3 files of 10 MiB at most.
func DefaultLogConfig() LogConfig {
	return LogConfig{Driver: "local", Options: map[string]string{"max-size": "10m", "max-file": "3"}}
}

// SessionSpec is the profile of one channel's session container, as data.
// Validate it before use; the driver validates it again.
type SessionSpec struct {
	// Name is the exact container name; build it with SessionName.
	Name string
	// Image is a local image reference; it is never pulled.
	Image string
	// Installation labels the container as this installation's.
	Installation string
	// Channel is the channel key, for the channel label and a journald tag.
	Channel string
	// Profile is the channel's profile: SANDBOX_PROFILE and ProfileLabel.
	Profile string
	// UID and GID run the worker; both > 0.
	UID, GID int
	// RunDir is the broker endpoint and the files the host hands the
	// worker: it holds the channel's broker.sock and the profile's
	// skills, read-only to the worker (Docker: bound at /run/sandbox).
	// WorkspaceDir is the channel's workspace, read-write, outliving the
	// container (Docker: bound at /workspace). Both absolute, clean,
	// apart.
	RunDir, WorkspaceDir string
	// TimeZone is the worker's TZ, an IANA zone; "" means UTC.
	TimeZone string
	// Limits; the zero value means DefaultSessionLimits.
	Limits SessionLimits
	// Log; a zero Driver means DefaultLogConfig.
	Log LogConfig
	// Skills is the digest of the skills tree the host copied into
	// RunDir/skills for this container ("" when the profile has none).
	// It is part of Digest, so a changed skill set recreates the
	// container; "" leaves Digest as it was before skills existed.
	Skills string `json:",omitempty"`
	// Disk names how the workspace is bounded ("hard": its own
	// filesystem mounted at WorkspaceDir; "soft"; "" for none). It is
	// part of the digest only: a container made before the workspace's
	// filesystem was mounted binds the directory beneath it, so a change
	// of the bound's mode recreates it.
	Disk string `json:",omitempty"`
	// Runtime is the OCI runtime the worker runs under: RuntimeRunc (or
	// "") or RuntimeRunsc (runtime.go). It is part of Digest, so a
	// channel whose runtime changes gets a new container at its next
	// turn; runc and "" leave Digest as it was before runtimes existed.
	Runtime string `json:",omitempty"`
}

var (
	prefixRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,40}$`)
	profileRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,100}$`)
	logDriverRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	tagCharRE   = regexp.MustCompile(`[^A-Za-z0-9_.:/-]`)
	segmentRE   = regexp.MustCompile(`[^A-Za-z0-9_-]`)
)

// ValidProfile reports whether name can name a session profile:
// ^[a-zA-Z0-9_-]{1,100}$.
func ValidProfile(name string) bool { return profileRE.MatchString(name) }

// The refusal texts of a SessionSpec (docs/session.md, "The container").
const (
	errSessionSpec  = specError("Invalid container specification")
	errSessionUser  = specError("Worker must be non-root")
	errSessionMount = specError("Invalid mount path")
	errSessionLog   = specError("Invalid container log driver")
)

// WithDefaults returns s with its zero fields set to the defaults.
func (s SessionSpec) WithDefaults() SessionSpec {
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	if s.Limits == (SessionLimits{}) {
		s.Limits = DefaultSessionLimits()
	}
	if s.Log.Driver == "" {
		s.Log = DefaultLogConfig()
	}
	return s
}

// Validate reports the first rule s (after WithDefaults) breaks, as an
// error matching ErrInvalidSpec whose text is the reference message.
func (s SessionSpec) Validate() error {
	s = s.WithDefaults()
	switch {
	case !validName(s.Name) || !validImage(s.Image) || !ValidProfile(s.Profile) ||
		!ValidInstallation(s.Installation) || !validChannelLabel(s.Channel):
		return errSessionSpec
	case s.UID <= 0 || s.GID <= 0:
		return errSessionUser
	case !validMountPath(s.RunDir) || !validMountPath(s.WorkspaceDir) ||
		strings.Contains(s.RunDir+s.WorkspaceDir, ":") || nested(s.RunDir, s.WorkspaceDir):
		return errSessionMount
	case !validTimeZone(s.TimeZone) || !s.Limits.limits().valid() || !ValidRuntime(s.Runtime):
		return errSessionSpec
	case !s.Log.valid():
		return errSessionLog
	}
	return nil
}

func validChannelLabel(ch string) bool {
	return rtsandbox.ChannelKey(ch).Valid() && !strings.ContainsFunc(ch, unicode.IsControl)
}

func validTimeZone(tz string) bool {
	_, err := time.LoadLocation(tz)
	return err == nil && tz != "Local"
}

// valid applies the docs/session.md, "The container" log rules: driver and option keys
// ^[a-z0-9][a-z0-9_.-]{0,63}$, option values without CR or LF.
func (l LogConfig) valid() bool {
	if !logDriverRE.MatchString(l.Driver) {
		return false
	}
	for k, v := range l.Options {
		if !logDriverRE.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
			return false
		}
	}
	return true
}

// ForChannel returns the log configuration of channel's container: l's
// options, plus, for journald without a tag of its own, the reference's
// tag "sandbox/<channel>" with characters outside [A-Za-z0-9_.:/-]
// replaced by "_".
func (l LogConfig) ForChannel(channel string) LogConfig {
	opts := maps.Clone(l.Options)
	if l.Driver == "journald" && opts["tag"] == "" {
		if opts == nil {
			opts = map[string]string{}
		}
		opts["tag"] = "sandbox/" + tagCharRE.ReplaceAllString(channel, "_")
	}
	return LogConfig{Driver: l.Driver, Options: opts}
}

// Env is the worker's whole environment: the profile, the time zone, a
// HOME on the tmpfs and the reference's harmless dummy token. No upstream
// URL and no credential: the worker dials the broker socket directly.
func (s SessionSpec) Env() []string {
	s = s.WithDefaults()
	return []string{
		"SANDBOX_PROFILE=" + s.Profile,
		"TZ=" + s.TimeZone,
		"HOME=/tmp/home",
		"CLAUDE_CODE_OAUTH_TOKEN=" + wire.SessionDummyOAuthKey,
	}
}

// Labels are the container's labels: installation, role "session",
// channel, profile and the spec digest.
func (s SessionSpec) Labels() map[string]string {
	return map[string]string{
		InstallationLabel: s.Installation,
		RoleLabel:         RoleSession,
		ChannelLabel:      s.Channel,
		ProfileLabel:      s.Profile,
		SpecLabel:         s.Digest(),
	}
}

// Digest is a short hash of everything the create body is made of except
// the labels themselves, so that a container made from another spec (an
// older host's limits, another user or zone) is recognised and recreated.
func (s SessionSpec) Digest() string {
	s = s.WithDefaults()
	if s.Runtime == RuntimeRunc { // the same container as "": one digest
		s.Runtime = ""
	}
	data, _ := json.Marshal(struct {
		SessionSpec
		Env   []string
		Log   LogConfig
		Tmpfs string
	}{s, s.Env(), s.Log.ForChannel(s.Channel), SessionTmpfs}) // a plain struct of strings and numbers: never fails
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// ValidSessionPrefix reports whether prefix can start session container
// names: ^[a-z0-9][a-z0-9-]{0,40}$, so that every name PrefixedSessionName
// makes of it keeps the container name rule and its length bound.
func ValidSessionPrefix(prefix string) bool { return prefixRE.MatchString(prefix) }

// maxSegment bounds the channel segment of a session container name;
// maxNameLen is the container name rule's length bound (nameRE).
const (
	maxSegment = 40
	maxNameLen = 91
)

// SessionName returns the container name of channel's session worker in
// installation under DefaultSessionPrefix (PrefixedSessionName).
func SessionName(installation, channel string) string {
	return PrefixedSessionName(DefaultSessionPrefix, installation, channel)
}

// PrefixedSessionName returns the container name of channel's session
// worker in installation: prefix (ValidSessionPrefix), "-", the channel's
// segment (lower-cased, for the operator's eye; at most 40 characters,
// fewer after a long prefix so the name stays within the 91 the name rule
// allows), "-" and 16 hex digits of sha256(installation, channel). The
// hash makes the name unique per channel and installation whatever the
// prefix: segments are lossy ("a:b" and "a_b") and lower-casing merges
// keys that differ in case, and a name two channels shared would let one
// channel's abort remove the other's container. The prefix is not hashed,
// so a channel's name under the default prefix is what it always was.
func PrefixedSessionName(prefix, installation, channel string) string {
	seg := strings.ToLower(segmentRE.ReplaceAllString(channel, "_"))
	room := maxNameLen - len(prefix) - len("--") - 16
	if n := min(maxSegment, max(room, 1)); len(seg) > n { // room < 1 only for an invalid prefix
		seg = seg[:n]
	}
	sum := sha256.Sum256([]byte(installation + "\x00" + channel))
	return prefix + "-" + seg + "-" + hex.EncodeToString(sum[:8])
}

// SessionStatus is what the engine says about a channel's container.
// Image, Profile and Digest are "" when unknown (missing, or unlabelled).
type SessionStatus struct {
	State   string // StateMissing, StateRunning or StateStopped
	Image   string
	Profile string
	Digest  string
}

// Stale reports the recreate rule of docs/session.md, "Session runtime": the container is not running,
// or its image, profile label or spec digest is known and differs from
// spec's.
func (st SessionStatus) Stale(spec SessionSpec) bool {
	differs := func(got, want string) bool { return got != "" && got != want }
	return st.State != StateRunning || differs(st.Image, spec.Image) ||
		differs(st.Profile, spec.Profile) || differs(st.Digest, spec.Digest())
}

// Current reports the driver's keep rule of docs/session.md, "The container": running, and image,
// profile label and spec digest all match exactly.
func (st SessionStatus) Current(spec SessionSpec) bool {
	return st.State == StateRunning && st.Image == spec.Image &&
		st.Profile == spec.Profile && st.Digest == spec.Digest()
}
