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
		return fmt.Sprintf(rtsandbox.SessionStatusFormat, st.Profile, st.Container)
	}
	return ""
}

// removeState removes what the runtime keeps of a channel switched off;
// nothing for a runtime that keeps nothing.
func (r *Router) removeState(ctx context.Context, channel rtsandbox.ChannelKey) error {
	if rr, ok := r.runtime.(RemoverRuntime); ok {
		return rr.Remove(ctx, channel)
	}
	return nil
}
