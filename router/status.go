package router

import (
	"context"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// Runtime modes of a channel (the config's profile modes).
const (
	ModeSealed  = "sealed"
	ModeSession = "session"
)

// Container states of a session channel (session spec §1.3 status).
// ContainerUnknown is the router's own: the runtime could not tell.
const (
	ContainerMissing = "missing"
	ContainerRunning = "running"
	ContainerStopped = "stopped"
	ContainerUnknown = "unknown"
)

// RuntimeStatus is a channel's runtime as the owner's status command shows
// it.
type RuntimeStatus struct {
	Mode    string // ModeSealed or ModeSession
	Profile string // the channel's profile name
	// Container is a session channel's container state (ContainerMissing,
	// ContainerRunning or ContainerStopped); "" in sealed mode, where
	// every turn has its own container.
	Container string
	// Workspace is a session channel's workspace against its disk bound;
	// nil when it has none or is not known.
	Workspace *WorkspaceUsage
}

// WorkspaceUsage is a session channel's workspace against its disk bound
// (session.WorkspaceUsage).
type WorkspaceUsage struct {
	Mode            string // "hard" or "soft"
	Mounted         bool   // false: a hard workspace not mounted now, figures unknown
	Bytes, MaxBytes int64
	Files, MaxFiles int
	Full            bool // turns are refused until fresh
}

// StatusRuntime is a Runtime that can describe a channel's runtime (the
// host's per-profile runtime implements it). It is optional: without it
// status shows the routing state only, as before session mode.
type StatusRuntime interface {
	Runtime
	Status(ctx context.Context, channel rtsandbox.ChannelKey) (RuntimeStatus, error)
}

// RemoverRuntime is a Runtime that keeps something of a channel between
// turns (session mode's long-lived container) and removes it when the
// owner switches the channel off. It is optional; Remove of a channel that
// has nothing to remove returns nil.
type RemoverRuntime interface {
	Runtime
	Remove(ctx context.Context, channel rtsandbox.ChannelKey) error
}

// statusLine is the status command's line about channel's runtime, "" when
// the runtime cannot describe it. A failure is logged and shows the
// container as unknown: the command still answers.
func (r *Router) statusLine(ctx context.Context, channel rtsandbox.ChannelKey) string {
	sr, ok := r.runtime.(StatusRuntime)
	if !ok {
		return ""
	}
	st, err := sr.Status(ctx, channel)
	if err != nil {
		r.log.Warn("runtime status unavailable", "channel", channel, "err", err)
		if st.Mode == ModeSession {
			st.Container = ContainerUnknown
		}
	}
	return formatStatus(st)
}

// formatStatus writes st with the fixed status texts; "" when st names no
// mode (a runtime that failed before it knew the profile).
func formatStatus(st RuntimeStatus) string {
	switch st.Mode {
	case ModeSealed:
		return fmt.Sprintf(rtsandbox.SealedStatusFormat, st.Profile)
	case ModeSession:
		line := fmt.Sprintf(rtsandbox.SessionStatusFormat, st.Profile, st.Container)
		if w := formatWorkspace(st.Workspace); w != "" {
			line += "\n" + w
		}
		return line
	}
	return ""
}

// formatWorkspace is the status line of a session channel's workspace,
// "" when it has no disk bound.
func formatWorkspace(w *WorkspaceUsage) string {
	const mib = 1 << 20
	switch {
	case w == nil:
		return ""
	case !w.Mounted:
		return rtsandbox.WorkspaceUnmountedStatus
	}
	line := fmt.Sprintf(rtsandbox.WorkspaceStatusFormat, w.Mode, float64(w.Bytes)/mib, float64(w.MaxBytes)/mib, w.Files, w.MaxFiles)
	if w.Full {
		line += rtsandbox.WorkspaceFullStatus
	}
	return line
}

// removeState removes what the runtime keeps of a channel switched off;
// nothing for a runtime that keeps nothing.
func (r *Router) removeState(ctx context.Context, channel rtsandbox.ChannelKey) error {
	if rr, ok := r.runtime.(RemoverRuntime); ok {
		return rr.Remove(ctx, channel)
	}
	return nil
}
