package session

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/effort"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Bounds and defaults of the turn deadline and the start timeout (docs/architecture.md, "The request path"
// step 2, docs/session.md, "Session runtime" "Readiness").
const (
	DefaultTurnTimeout  = rtsandbox.SessionTurnTimeout // 600 s
	MinTurnTimeout      = time.Second
	MaxTurnTimeout      = time.Hour
	DefaultStartTimeout = rtsandbox.SessionStartTimeout // 90 s
	MinStartTimeout     = time.Second
	MaxStartTimeout     = 10 * time.Minute
	// ReadyPoll is how often a start asks the broker whether the worker
	// announced itself.
	ReadyPoll = 100 * time.Millisecond
	// LogLines is how many container log lines an aborted turn saves.
	LogLines = 200
)

// Options configure a Runtime; New checks every field.
type Options struct {
	// Driver runs the channels' containers (*docker.SessionDriver).
	Driver container.LongLived
	// NewBroker makes the broker of channel's worker on profile,
	// listening on socketPath (the host wires *broker.Session:
	// NewSession, then Listen; the channel is what its startup window is
	// charged to). The runtime removes a stale socket file first and
	// makes a new broker whenever the channel's profile changes or its
	// container is recreated.
	NewBroker func(channel rtsandbox.ChannelKey, profile, socketPath string) (Broker, error)
	// Profiles are the session profiles by name (^[a-zA-Z0-9_-]{1,100}$).
	Profiles map[string]Profile
	// ProfileFor names a channel's profile; a name not in Profiles fails
	// the channel's turns with ErrUnknownProfile.
	ProfileFor func(rtsandbox.ChannelKey) string
	// PartyDir holds one directory per channel (docs/session.md, "Directories and defences"): absolute, private
	// to this service (0700, owned by its uid, no group or other bits),
	// created when missing. Its canonical path is used.
	PartyDir string
	// Image is the worker image of profiles without one of their own.
	Image string
	// Installation labels the containers as this installation's.
	Installation string
	// ContainerPrefix starts the containers' names
	// (container.PrefixedSessionName; config session.container_prefix):
	// ^[a-z0-9][a-z0-9-]{0,40}$, "" means container.DefaultSessionPrefix.
	ContainerPrefix string
	// UID and GID run the workers. A service not running as root may
	// leave both 0 (its own ids) or name its own ids; a service running
	// as root must name a non-root user, to whom the run and workspace
	// directories and the socket are handed.
	UID, GID int
	// TimeZone is the workers' IANA zone; "" means UTC.
	TimeZone string
	// Log is the containers' log driver; the zero value means
	// container.DefaultLogConfig ("local", 3×10 MiB).
	Log container.LogConfig
	// TurnTimeout is the turn deadline, 1 s..1 h; 0 means 600 s.
	TurnTimeout time.Duration
	// StartTimeout bounds a worker's readiness after its container is
	// running, 1 s..10 min; 0 means 90 s.
	StartTimeout time.Duration
	// CompactorTimeout is the brokers' host compactor's timeout, 0 when
	// they have none. It must leave half the turn (docs/protocol.md, "Compaction"):
	// at most TurnTimeout/2.
	CompactorTimeout time.Duration
	// Judge judges each turn's thinking level; nil means
	// effort.Heuristic.
	Judge effort.Judge
	// Memory returns the prompt memory block of a turn (docs/session-mode.md, "Memory"),
	// built by the host for the turn's binding (memstore.Store.Block), and
	// its visibility: "private" when it holds the speaker's own memory,
	// "shared" when it holds only what everyone in the channel may read,
	// "" with an empty block. A non-empty block with visibility "" is sent
	// as private; any other visibility fails the turn. nil gives no
	// memory.
	Memory func(ctx context.Context, b rtsandbox.Binding) (block, visibility string, err error)
	// Scrub masks credential forms in text bound for the operator log
	// (failure messages, the worker's log lines); nil removes control
	// characters only. The host wires its secret-aware scrubber.
	Scrub func(string) string
	// Fetcher downloads the attachments that surfaces hand over by URL
	// (Discord's CDN, docs/session.md, "Attachments in, reply files out"): public addresses only, bounded, no
	// credentials. nil means the production one (&safefetch.Fetcher{}:
	// the system resolver and the pinned transport). Tests pass one whose
	// trusted seams reach a loopback server (safefetchtest.Loopback); the
	// address policy still runs.
	Fetcher *safefetch.Fetcher
	// Logger receives operator records; nil discards them.
	Logger *slog.Logger
	// OnTurn, when set, receives every admitted turn's TurnStats once it
	// ended (the turn metrics). It runs on the turn's goroutine and must
	// not block.
	OnTurn func(TurnStats)
	// Now is the clock of archive names and of pruning; nil means
	// time.Now.
	Now func() time.Time
	// Disk bounds each channel's workspace (disk.go); the zero value
	// bounds nothing. Mode hard on a host that cannot mount an image is
	// refused (ErrDiskUnavailable); auto is logged once with the mode it
	// resolved to.
	Disk DiskOptions
}

// Profile is what the runtime needs of a session profile; the host fills
// it from config. The profile's model, tools and MCP servers are the
// broker's business (NewBroker).
type Profile struct {
	// Image overrides Options.Image for this profile.
	Image string
	// Limits of the container; the zero value means
	// container.DefaultSessionLimits (1.5 GiB, 1 CPU, 256 PIDs).
	Limits container.SessionLimits
	// Skills is the profile's validated skills tree (docs/session.md, "Skills"), copied into
	// each channel's run/skills before its container is created; nil for
	// none. Its digest is part of the container spec, so a changed tree
	// recreates the container.
	Skills *skilltree.Tree
	// Runtime is the OCI runtime of the profile's containers
	// (container.RuntimeRunc, "" for runc, or container.RuntimeRunsc). It
	// is part of the container spec, so a changed runtime recreates the
	// channel's container at its next turn.
	Runtime string
}

// settings are Options after defaults and checks.
type settings struct {
	Options
	hostRoot  bool  // the service runs as root: hand dirs and socket to UID:GID
	disk      *disk // the workspace bound, its mode resolved
	migration *migration
}

// migration remembers the channels whose directory migrate has settled
// in this process.
type migration struct {
	sync.Mutex
	done map[rtsandbox.ChannelKey]bool
}

// check applies the defaults and every setup refusal (docs/session.md, "Directories and defences" "The
// constructor also requires", the reference's tests).
func check(o Options) (settings, error) {
	if o.Driver == nil || o.NewBroker == nil || o.ProfileFor == nil || len(o.Profiles) == 0 {
		return settings{}, setupError("a driver, a broker factory, profiles and a profile function are required")
	}
	if o.TurnTimeout == 0 {
		o.TurnTimeout = DefaultTurnTimeout
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.TurnTimeout < MinTurnTimeout || o.TurnTimeout > MaxTurnTimeout {
		return settings{}, setupError("turn timeout %v is outside 1s..1h", o.TurnTimeout)
	}
	if o.StartTimeout < MinStartTimeout || o.StartTimeout > MaxStartTimeout {
		return settings{}, setupError("start timeout %v is outside 1s..10m", o.StartTimeout)
	}
	if o.CompactorTimeout < 0 || !wire.CompactorTimeoutFits(o.CompactorTimeout, o.TurnTimeout) {
		return settings{}, setupError("The compactor's timeout must leave half the turn: %v is more than half of the turn timeout %v", o.CompactorTimeout, o.TurnTimeout)
	}
	if o.ContainerPrefix == "" {
		o.ContainerPrefix = container.DefaultSessionPrefix
	}
	if !container.ValidSessionPrefix(o.ContainerPrefix) {
		return settings{}, setupError("container prefix %q does not match ^[a-z0-9][a-z0-9-]{0,40}$", o.ContainerPrefix)
	}
	s := settings{Options: o, migration: &migration{done: map[rtsandbox.ChannelKey]bool{}}}
	if err := s.checkUser(os.Geteuid(), os.Getegid()); err != nil {
		return settings{}, err
	}
	if err := s.checkProfiles(); err != nil {
		return settings{}, err
	}
	if err := s.preparePartyDir(); err != nil {
		return settings{}, err
	}
	if s.Judge == nil {
		s.Judge = effort.Heuristic{}
	}
	if s.Scrub == nil {
		s.Scrub = stripControls
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Fetcher == nil {
		s.Fetcher = &safefetch.Fetcher{}
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if err := s.checkDisk(); err != nil {
		return settings{}, err
	}
	return s, nil
}

// checkUser refuses root workers (docs/session.md, "The container" "Worker must be non-root"). A
// service running as root must name a non-root worker user; any other
// service runs workers as itself, so the workspace stays its own.
func (s *settings) checkUser(euid, egid int) error {
	if s.UID < 0 || s.GID < 0 {
		return setupError("Worker must be non-root")
	}
	if euid == 0 {
		if s.UID == 0 || s.GID == 0 {
			return setupError("Worker must be non-root: the host runs as root, so sandbox.user must name a non-root uid:gid")
		}
		s.hostRoot = true
		return nil
	}
	if s.UID == 0 && s.GID == 0 {
		s.UID, s.GID = euid, egid
	}
	if s.UID != euid || s.GID != egid {
		return setupError("worker user %d:%d must be this service's own uid:gid", s.UID, s.GID)
	}
	return nil
}

// checkProfiles validates every profile's container spec on a sample
// channel: names, images, limits, the user, the zone, the log driver and
// the installation, so a bad config fails at startup, not at a turn.
func (s *settings) checkProfiles() error {
	for name, p := range s.Profiles {
		spec := s.spec("check:profile", name, p, dirs{run: "/party/x/run", workspace: "/party/x/workspace"})
		if err := spec.Validate(); err != nil {
			return setupError("profile %q: %w", name, err)
		}
	}
	return nil
}

// preparePartyDir creates the party dir when missing and requires it
// private to this service; its canonical path is kept.
func (s *settings) preparePartyDir() error {
	if !filepath.IsAbs(s.PartyDir) || filepath.Clean(s.PartyDir) == "/" {
		return setupError("party dir must be an absolute dedicated directory")
	}
	canon, err := privdir.Make(s.PartyDir)
	if err != nil {
		return setupError("party dir: %w", err)
	}
	s.PartyDir = canon
	return nil
}

// spec is the container spec of channel under profile.
func (s *settings) spec(channel rtsandbox.ChannelKey, name string, p Profile, d dirs) container.SessionSpec {
	image := p.Image
	if image == "" {
		image = s.Image
	}
	return container.SessionSpec{
		Name: s.name(channel), Image: image,
		Installation: s.Installation, Channel: string(channel), Profile: name,
		UID: s.UID, GID: s.GID, RunDir: d.run, WorkspaceDir: d.workspace,
		TimeZone: s.TimeZone, Limits: p.Limits, Log: s.Log, Skills: p.skillsDigest(), Disk: s.disk.label(),
		Runtime: p.Runtime,
	}.WithDefaults()
}

// name is channel's container name: the prefix, the channel's segment
// and the installation+channel hash.
func (s *settings) name(channel rtsandbox.ChannelKey) string {
	return container.PrefixedSessionName(s.ContainerPrefix, s.Installation, string(channel))
}

// stripControls is the default Scrub: control characters other than tab
// and newline become spaces.
func stripControls(text string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return ' '
		}
		return r
	}, text)
}
