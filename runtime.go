package rtsandbox

import (
	"context"
	"slices"
)

// Runtime is one mode's runtime as the router drives it: the sealed mode
// (a fresh container per turn) and the session mode (one long-lived worker
// per channel) each implement it whole, and so does the host's mux that
// picks a channel's mode from its profile. The router sees nothing else of
// a runtime and never asks which mode it is.
type Runtime interface {
	// Run runs one turn of b with the message's input. onText, when not
	// nil, receives the text of the turn's streamed model answers as they
	// arrive (answer numbers them from 1; delta is already past the
	// broker's reflection filter); it must not block. A runtime that
	// streams nothing never calls it. A runtime that cannot take
	// attachments answers from in.SealedText().
	//
	// The reply may have OK false (the worker gave up within its limits);
	// an error means the turn was refused, failed, timed out or was
	// stopped, and its text is for the operator only (GuestText maps its
	// kind). A turn cut by its deadline wraps ErrTurnTimeout, one cut by
	// Stop ErrTurnStopped. Answer.Files is nil when err is not nil.
	Run(ctx context.Context, b Binding, in TurnInput, onText func(answer int, delta string)) (Answer, error)
	// StartFresh forgets the channel's conversation (the owner's fresh).
	StartFresh(channel ChannelKey) error
	// Stop ends the channel's running turn, if any, and reports whether
	// one ran.
	Stop(channel ChannelKey) bool
	// Status describes the channel's runtime for the owner's status
	// command. On error the status still names what the runtime knew.
	Status(ctx context.Context, channel ChannelKey) (RuntimeStatus, error)
	// Remove removes what the runtime keeps of the channel between turns
	// (the owner switched it off); a runtime or a channel that keeps
	// nothing returns nil.
	Remove(ctx context.Context, channel ChannelKey) error
}

// Answer is what a turn gives back: the reply and its files (nil for
// none).
type Answer struct {
	Reply Reply
	Files []File
}

// Runtime modes of a channel (the config's profile modes).
const (
	ModeSealed  = "sealed"
	ModeSession = "session"
)

// Container states of a session channel (docs/session.md, "Session runtime").
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
	Mode    string // ModeSealed or ModeSession; "" shows no runtime line
	Profile string // the channel's profile name
	// Container is a session channel's container state (ContainerMissing,
	// ContainerRunning or ContainerStopped); "" in sealed mode, where
	// every turn has its own container.
	Container string
	// Workspace is a session channel's workspace against its disk bound;
	// nil when it has none or is not known.
	Workspace *WorkspaceUsage
}

// WorkspaceUsage is a session channel's workspace against its disk bound.
type WorkspaceUsage struct {
	// Mode is the bound in force: "hard" or "soft".
	Mode string
	// Mounted is false for a hard workspace whose image is not mounted
	// (the channel is off, or has not run since the host started): its
	// figures are unknown until its next turn mounts it.
	Mounted bool
	// Bytes and Files are what is used, MaxBytes and MaxFiles the bound.
	// A soft measure stops once a bound is passed, so past it the figures
	// are lower bounds.
	Bytes, MaxBytes int64
	Files, MaxFiles int
	// Full reports a workspace whose turns are refused until fresh.
	Full bool
}

// SealedText is the model input of in for a runtime that cannot take
// attachments: Text, and a line with AttachmentsUnsupportedText when the
// message had files of its own (Attached, or an attachment not from the
// replied-to message). The replied-to message's files never count.
func (in TurnInput) SealedText() string {
	own := in.Attached > 0 || slices.ContainsFunc(in.Attachments, func(a Attachment) bool { return !a.FromReference })
	if own {
		return in.Text + "\n" + AttachmentsUnsupportedText
	}
	return in.Text
}
