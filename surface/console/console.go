// Package console is the terminal chat surface: each line the user types
// becomes a router message in one channel, with a spinner while its turn
// runs. It is a router surface like any other: the router admits the
// message, runs it on the channel's queue and delivers the reply (or the
// fixed failure text) back; the console only prints. /fresh is the owner
// command fresh, run on the channel's queue.
//
// Reply files (a session runtime's) are listed after the reply's text, one
// line each with the file's name and size; with Chat.FilesDir set they are
// also written there (files.go).
//
// The wiring registers the Chat with the router (router.AddSurface under
// the channel's kind) before Run.
package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Router is what the console needs of the router (*router.Router).
type Router interface {
	Handle(ctx context.Context, m router.Message) error
	Command(ctx context.Context, c router.Command) (string, error)
}

// Chat is one terminal conversation. Set the fields before Run; Chat
// implements router.Surface for its channel.
type Chat struct {
	Router  Router
	Channel rtsandbox.ChannelKey
	// Author is the person at the terminal, as the router's access rules
	// know them (Channel's kind and Author.ID make their identity).
	Author router.Author
	In     io.Reader
	Out    io.Writer
	// Spinner animates while a turn runs; turn it off when Out is not a
	// terminal.
	Spinner bool
	Logger  *slog.Logger
	// FilesDir, when set, is an existing directory where reply files are
	// written (files.go); "" only lists them.
	FilesDir string

	mu       sync.Mutex // Out and the spinner
	spinStop func()     // set while the spinner runs
	n        int        // messages sent, for their ids
}

var _ router.Surface = (*Chat)(nil)

// Run reads lines until EOF, /quit or ctx ends.
func (c *Chat) Run(ctx context.Context) error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.print(fmt.Sprintf("rtsandbox chat in %s as %s. %s\n", c.Channel, c.Author.Name, rtsandbox.ConsoleHelpText))
	lines := bufio.NewScanner(c.In)
	lines.Buffer(make([]byte, 0, 64<<10), 4*rtsandbox.MaxTextLen)
	for {
		c.print("you> ")
		if !lines.Scan() {
			c.print("\n")
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
			c.print(rtsandbox.ConsoleHelpText + "\n")
		case "/fresh":
			c.fresh(ctx)
		default:
			c.send(ctx, line)
		}
	}
}

// fresh runs the owner command fresh and prints its fixed answer.
func (c *Chat) fresh(ctx context.Context) {
	text, err := c.Router.Command(ctx, router.Command{Channel: c.Channel, Author: c.Author, Action: router.ActionFresh})
	if err != nil {
		c.Logger.Warn("start fresh failed", "channel", string(c.Channel), "err", err)
	}
	c.print(text + "\n")
}

// send submits one line and waits until the router settled it; what the
// turn posts arrives through Deliver meanwhile.
func (c *Chat) send(ctx context.Context, text string) {
	c.n++
	m := router.Message{Channel: c.Channel, ID: strconv.Itoa(c.n), Author: c.Author, Text: text, MentionsBot: true}
	err := c.Router.Handle(ctx, m)
	c.stopSpinner()
	if err != nil {
		c.Logger.Warn("message not answered", "channel", string(c.Channel), "reason", router.Reason(err), "err", err)
	}
}

// Deliver implements router.Surface: it prints the chunk, then the
// delivery's files (files.go). A report, which may arrive while the user
// types, starts on a line of its own.
func (c *Chat) Deliver(_ context.Context, d router.Delivery) error {
	c.stopSpinner()
	prefix := "agent> "
	if d.Kind == router.KindReport {
		prefix = "\n" + prefix
	}
	if d.Chunk != "" || len(d.Files) == 0 {
		c.print(prefix + Printable(d.Chunk) + "\n")
	}
	for _, f := range d.Files {
		c.print(c.file(f) + "\n")
	}
	return nil
}

// Typing implements router.Surface: it starts the spinner, when enabled
// and not yet running.
func (c *Chat) Typing(context.Context, rtsandbox.ChannelKey, string) error {
	if !c.Spinner {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spinStop == nil {
		c.spinStop = c.spin()
	}
	return nil
}

func (c *Chat) print(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprint(c.Out, s)
}

func (c *Chat) stopSpinner() {
	c.mu.Lock()
	stop := c.spinStop
	c.spinStop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
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
// the drawing goroutine and clears the line. Drawing takes c.mu.
func (c *Chat) spin() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		frames := `|/-\`
		t := time.NewTicker(120 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			c.print(fmt.Sprintf("\r%c turn running…", frames[i%len(frames)]))
			select {
			case <-done:
				c.print("\r\033[K")
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
