// Package console is the terminal chat surface: each line the user types
// becomes a sealed turn in one channel, with a spinner while it runs. It
// shows guests' fixed texts only; details go to the logger.
package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// Runtime is what the console needs of a sealed runtime.
type Runtime interface {
	RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error)
	StartFresh(channel rtsandbox.ChannelKey) error
}

// Fixed texts the console shows.
const (
	TextFailed  = "The sandbox turn failed."
	TextStopped = "The sandbox turn failed or was stopped."
	TextFresh   = "Started fresh: the next turn forgets the conversation history."
	TextHelp    = "Type a message and press Enter. /fresh forgets the history, /quit leaves."
)

// Chat is one terminal conversation.
type Chat struct {
	Runtime Runtime
	Channel rtsandbox.ChannelKey
	Speaker rtsandbox.Speaker
	In      io.Reader
	Out     io.Writer
	// Spinner animates while a turn runs; turn it off when Out is not a
	// terminal.
	Spinner bool
	Logger  *slog.Logger
}

// Run reads lines until EOF, /quit or ctx ends.
func (c *Chat) Run(ctx context.Context) error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	fmt.Fprintf(c.Out, "rtsandbox chat in %s as %s. %s\n", c.Channel, c.Speaker.Name, TextHelp)
	lines := bufio.NewScanner(c.In)
	lines.Buffer(make([]byte, 0, 64<<10), 4*rtsandbox.MaxTextLen)
	for {
		fmt.Fprint(c.Out, "you> ")
		if !lines.Scan() {
			fmt.Fprintln(c.Out)
			return lines.Err()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch line := strings.TrimSpace(lines.Text()); line {
		case "":
		case "/quit", "/exit":
			return nil
		case "/help":
			fmt.Fprintln(c.Out, TextHelp)
		case "/fresh":
			c.fresh()
		default:
			c.turn(ctx, line)
		}
	}
}

func (c *Chat) fresh() {
	if err := c.Runtime.StartFresh(c.Channel); err != nil {
		c.Logger.Error("start fresh failed", "channel", string(c.Channel), "err", err)
		fmt.Fprintln(c.Out, TextFailed)
		return
	}
	fmt.Fprintln(c.Out, TextFresh)
}

func (c *Chat) turn(ctx context.Context, text string) {
	stop := c.spin()
	reply, err := c.runTurn(ctx, text)
	stop()
	switch {
	case err != nil:
		c.Logger.Error("sandbox turn failed; inspect container cleanup and broker configuration",
			"channel", string(c.Channel), "err", err)
		fmt.Fprintln(c.Out, "agent> "+TextStopped)
	case !reply.OK:
		c.Logger.Warn("sandbox worker replied ok:false", "channel", string(c.Channel))
		fmt.Fprintln(c.Out, "agent> "+TextFailed)
	default:
		fmt.Fprintln(c.Out, "agent> "+Printable(reply.Text))
	}
}

// runTurn runs one turn; a panic in the runtime becomes an error, so the
// chat answers the fixed failure text and reads the next line. The panic
// value is logged by type only (it could quote the conversation), with the
// stack.
func (c *Chat) runTurn(ctx context.Context, text string) (reply rtsandbox.Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.Logger.Error("recovered from a panic", "where", "runtime", "channel", string(c.Channel),
				"panic", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
			err = errors.New("the runtime panicked")
		}
	}()
	// The person at the terminal talks as a member: the console has no
	// owner commands.
	return c.Runtime.RunTurn(ctx, rtsandbox.Binding{Channel: c.Channel, Speaker: c.Speaker, Tier: rtsandbox.TierMember}, text)
}

// Printable drops control characters other than newline and tab: model
// text (and the web pages it read) must not drive the terminal with
// escape sequences (clipboard writes, title changes, cursor tricks).
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return -1
		}
		return r
	}, s)
}

// spin draws a spinner until the returned stop is called; stop waits for
// the drawing goroutine and clears the line.
func (c *Chat) spin() (stop func()) {
	if !c.Spinner {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		frames := `|/-\`
		t := time.NewTicker(120 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(c.Out, "\r%c sealed turn running…", frames[i%len(frames)])
			select {
			case <-done:
				fmt.Fprint(c.Out, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
