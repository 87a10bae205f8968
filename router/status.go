package router

import (
	"context"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// statusLine is the status command's line about channel's runtime, ""
// when the runtime cannot describe it, and the runtime's mode. A failure
// is logged and shows the container as unknown: the command still answers.
func (r *Router) statusLine(ctx context.Context, channel rtsandbox.ChannelKey) (line, mode string) {
	st, err := r.runtime.Status(ctx, channel)
	if err != nil {
		r.log.Warn("runtime status unavailable", "channel", channel, "err", err)
		if st.Mode == rtsandbox.ModeSession {
			st.Container = rtsandbox.ContainerUnknown
		}
	}
	return formatStatus(st), st.Mode
}

// formatStatus writes st with the fixed status texts; "" when st names no
// mode (a runtime that failed before it knew the profile).
func formatStatus(st rtsandbox.RuntimeStatus) string {
	switch st.Mode {
	case rtsandbox.ModeSealed:
		return fmt.Sprintf(rtsandbox.SealedStatusFormat, st.Profile)
	case rtsandbox.ModeSession:
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
func formatWorkspace(w *rtsandbox.WorkspaceUsage) string {
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
	return r.runtime.Remove(ctx, channel)
}
