package router

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

// Owner command actions: `/<root> sandbox on|off|status|fresh|stop`.
const (
	ActionOn     = "on"
	ActionOff    = "off"
	ActionStatus = "status"
	ActionFresh  = "fresh"
	ActionStop   = "stop"
)

// Actions returns the owner command actions in display order.
func Actions() []string {
	return []string{ActionOn, ActionOff, ActionStatus, ActionFresh, ActionStop}
}

// Error classes of Command, beside ErrStopping and context errors.
var (
	ErrNotOwner      = fmt.Errorf("%w: not an owner", rtsandbox.ErrRefused)
	ErrNeedsChannel  = fmt.Errorf("%w: sandbox commands require a guild channel", rtsandbox.ErrRefused)
	ErrUnknownAction = fmt.Errorf("%w: unknown sandbox command", rtsandbox.ErrInvalid)
)

// Command is an owner command as a surface received it.
type Command struct {
	Channel rtsandbox.ChannelKey // where it was issued
	Author  Author
	// Direct: issued in a DM (or without a channel); refused.
	Direct bool
	Action string // one of Actions
}

// Command runs an owner command and returns the fixed text to show its
// issuer. The text is set even when err is not nil; err is for the surface's
// own decisions and logs: ErrUnknownAction, ErrNotOwner, ErrNeedsChannel,
// ErrStopping, ctx's error, or an internal failure (already logged).
//
// The owner guard resolves the author now, on every command. on, off,
// status and fresh run on the channel's queue, so they take effect after
// the turns already queued there; stop does not wait. ctx bounds only the
// wait: a queued command still runs after ctx ends.
func (r *Router) Command(ctx context.Context, c Command) (string, error) {
	text, err := r.command(ctx, c)
	if derr := r.door.Check(text, nil); derr != nil {
		r.refusedAtDoor(c.Channel, kindCommand, derr)
		return rtsandbox.CommandFailedText, derr
	}
	return text, err
}

// command is Command before the door.
func (r *Router) command(ctx context.Context, c Command) (string, error) {
	switch c.Action {
	case ActionOn, ActionOff, ActionStatus, ActionFresh, ActionStop:
	default:
		return rtsandbox.UnknownActionText, ErrUnknownAction
	}
	if c.Author.Bot || c.Author.Integration {
		return rtsandbox.NotOwnerText, ErrNotOwner
	}
	if _, tier := r.access.Resolve(r.actor(c.Channel, c.Author)); tier != access.Owner {
		return rtsandbox.NotOwnerText, ErrNotOwner
	}
	if c.Direct || !c.Channel.Valid() {
		return rtsandbox.NeedsChannelText, ErrNeedsChannel
	}
	switch c.Action {
	case ActionStop:
		if r.Stop(c.Channel) {
			return rtsandbox.StoppedText, nil
		}
		return rtsandbox.IdleText, nil
	case ActionFresh:
		_, err := r.StartFresh(ctx, c.Channel)
		switch {
		case errors.Is(err, ErrNoClaim):
			return rtsandbox.NotOwnedText, nil
		case err != nil:
			return r.commandFailed(c, err)
		}
		return rtsandbox.FreshText, nil
	}
	var (
		enabled bool
		line    string // status: the runtime's line
		mode    string // on, status: the runtime's mode, for the enabled text
	)
	err := r.inQueue(ctx, c.Channel, func(qctx context.Context) error {
		var err error
		switch c.Action {
		case ActionOn:
			if err = r.channels.Enable(c.Channel); err == nil {
				_, mode = r.statusLine(qctx, c.Channel)
			}
		case ActionOff:
			// Off first, so no turn starts again; then what the runtime
			// keeps between turns (a session container) goes.
			if err = r.channels.Disable(c.Channel); err == nil {
				err = r.removeState(qctx, c.Channel)
			}
		case ActionStatus:
			line, mode = r.statusLine(qctx, c.Channel)
		}
		enabled = r.channels.Enabled(c.Channel)
		return err
	})
	if err != nil {
		return r.commandFailed(c, err)
	}
	text := rtsandbox.DisabledText
	if enabled {
		text = rtsandbox.EnabledTextFor(mode)
	}
	if line != "" {
		text += "\n" + line
	}
	return r.withUsage(ctx, c, text), nil
}

// withUsage appends the channel's budget usage to the status text.
func (r *Router) withUsage(ctx context.Context, c Command, text string) string {
	if c.Action != ActionStatus || r.usage == nil {
		return text
	}
	if u := r.usage(ctx, c.Channel); u != "" {
		return text + "\n" + u
	}
	return text
}

func (r *Router) commandFailed(c Command, err error) (string, error) {
	if errors.Is(err, ErrStopping) {
		return rtsandbox.RestartingText, err
	}
	// The wait ended (an interaction about to expire, a client gone) but
	// the command stays queued and will still apply: say so, not "failed".
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return rtsandbox.QueuedText, err
	}
	r.log.Error("owner command failed", "channel", c.Channel, "action", c.Action, "err", err)
	// A session channel's own bounded workspace filled is not the host's
	// disk: the runtime marks it (rtsandbox.ErrWorkspaceFull).
	if errors.Is(err, rtsandbox.ErrWorkspaceFull) {
		return rtsandbox.WorkspaceFullText, err
	}
	if errors.Is(err, syscall.ENOSPC) {
		return rtsandbox.DiskFullText, err
	}
	return rtsandbox.CommandFailedText, err
}
