package router

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"

	"github.com/rtsandbox/rtsandbox"
)

// ErrPanicked marks an error made from a recovered panic: a surface call,
// the runtime, a claim or a task of the queue panicked. The router
// recovers every panic of work it runs for a channel, so one broken call
// fails only itself (docs/host.md, "Routing rules": a failed job never blocks the next).
var ErrPanicked = errors.New("panicked")

// recovered turns a panic value recovered at where into an error wrapping
// ErrPanicked and logs it, with the stack, under channel. The value's text
// is kept only for runtime errors, which the Go runtime words itself; any
// other value could quote a guest's message or a reply, so it is named by
// its type and the stack shows where it came from.
func recovered(log *slog.Logger, channel rtsandbox.ChannelKey, where string, p any) error {
	detail := fmt.Sprintf("a value of type %T", p)
	if re, ok := p.(runtime.Error); ok {
		detail = re.Error()
	}
	err := fmt.Errorf("%s %w: %s", where, ErrPanicked, detail)
	log.Error("recovered from a panic", "channel", channel, "where", where, "err", err, "stack", string(debug.Stack()))
	return err
}
