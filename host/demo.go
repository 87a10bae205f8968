package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/sealed"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// demoKeyEnv names the stand-in model's key inside the demo's own
// environment; it never comes from, or goes to, the real environment.
const demoKeyEnv = "RTSANDBOX_DEMO_MODEL_KEY"

// demoTurns is the scripted conversation: the first turn stores a speaker
// memory through memory_set, the second recalls it in a new container.
var demoTurns = []string{"remember that I drink tea", "what do I drink?"}

// DemoOptions are the demo's stand-in model and worker.
type DemoOptions struct {
	ModelURL, Key string // the scripted stand-in's chat URL and its key
	Image         string // built when missing, rebuilt when stale
	UID, GID      int
}

// Demo runs two sealed turns in one channel against a scripted stand-in
// model, printing each phase's time to out: the first stores a memory, the
// second, in a new container, recalls it.
func Demo(ctx context.Context, out io.Writer, log *slog.Logger, o DemoOptions) error {
	d, closeDriver, err := DockerDriver(nil)
	if err != nil {
		return err
	}
	defer closeDriver()
	if err := demoImage(ctx, out, o.Image); err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "rtsdemo") // short: the socket path limit
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	cfg := &config.Config{
		StateDir: state, AllowHTTP: true,
		Model:   config.Model{URL: upstream.MustParseEndpoint(o.ModelURL, true), Name: "scripted-stand-in", APIKeyEnv: demoKeyEnv},
		Sandbox: config.Sandbox{Image: o.Image, UID: o.UID, GID: o.GID, TimeZone: "UTC"},
	}
	calls := &modelCalls{next: log.Handler(), count: &callCount{}}
	var stats sealed.TurnStats
	s, err := NewSealedRuntime(cfg, func(k string) string {
		if k == demoKeyEnv {
			return o.Key
		}
		return ""
	}, SealedOptions{Driver: d, Logger: slog.New(calls), OnTurn: func(ts sealed.TurnStats) { stats = ts }})
	if err != nil {
		return err
	}
	defer s.Close()
	return demoConversation(ctx, out, s, calls, &stats)
}

// demoImage builds the image when it is missing and rebuilds it when it
// holds another worker than this binary's, saying which.
func demoImage(ctx context.Context, out io.Writer, tag string) error {
	r, err := EnsureImage(ctx, tag, "--image")
	if err != nil {
		return err
	}
	switch r.State {
	case workerimage.Missing:
		fmt.Fprintf(out, "image: built %s in %s\n", tag, r.Took.Round(time.Millisecond))
	case workerimage.Stale, workerimage.Foreign:
		fmt.Fprintf(out, "image: %s\n", r)
	default:
		fmt.Fprintf(out, "image: %s (already built)\n", tag)
	}
	return nil
}

func demoConversation(ctx context.Context, out io.Writer, s *SealedRuntime, calls *modelCalls, stats *sealed.TurnStats) error {
	speaker := rtsandbox.Speaker{ID: "guest", Name: "Guest", PrincipalID: "demo:guest"}
	var last rtsandbox.Reply
	for i, text := range demoTurns {
		if err := ctx.Err(); err != nil { // stopped (its output closed, a signal): no further turn
			return fmt.Errorf("turn %d: %w", i+1, err)
		}
		calls.reset()
		fmt.Fprintf(out, "\nturn %d (a new sealed container)\n  guest: %s\n", i+1, text)
		reply, err := s.Runtime.RunTurn(ctx, rtsandbox.Binding{Channel: "demo:lobby", Speaker: speaker, Tier: rtsandbox.TierMember}, text)
		printPhases(out, *stats, calls)
		if err != nil {
			return fmt.Errorf("turn %d: %w", i+1, err)
		}
		if !reply.OK {
			return fmt.Errorf("turn %d: the worker replied ok:false: %q", i+1, reply.Text)
		}
		fmt.Fprintf(out, "  agent: %s\n", reply.Text)
		last = reply
	}
	if !strings.Contains(last.Text, "tea") {
		return errors.New("the second turn did not recall the stored memory")
	}
	fmt.Fprintln(out, "\nthe second container recalled what the first one stored; the model key never entered either")
	return nil
}

func printPhases(out io.Writer, st sealed.TurnStats, calls *modelCalls) {
	phase := func(name string, at time.Time) {
		if !at.IsZero() {
			fmt.Fprintf(out, "  %-20s +%s\n", name, at.Sub(st.Admitted).Round(100*time.Microsecond))
		}
	}
	phase("container created", st.Created)
	phase("container started", st.Started)
	phase("first broker call", st.FirstCall)
	n, d := calls.get()
	fmt.Fprintf(out, "  %-20s %d call(s), %s in the model\n", "model", n, d.Round(100*time.Microsecond))
	if !st.Replied.IsZero() {
		phase("reply", st.Replied)
	} else {
		phase("reply", st.Exited)
	}
	if st.Settled != nil {
		// An early reply: the container goes after the answer; the demo
		// shows that it does.
		<-st.Settled
		fmt.Fprintf(out, "  %-20s +%s (after the answer)\n", "container removed", time.Since(st.Admitted).Round(100*time.Microsecond))
		return
	}
	phase("container removed", st.Removed)
}

// modelCalls is a slog.Handler that counts the broker's /model audit
// records and adds up their durations, and passes every record on to next
// (the demo's --log-format logger at LOG_LEVEL).
type modelCalls struct {
	next  slog.Handler
	count *callCount // shared by the handlers WithAttrs and WithGroup derive
}

// callCount is the /model calls of the current turn.
type callCount struct {
	mu sync.Mutex
	n  int
	d  time.Duration
}

func (m *modelCalls) Enabled(context.Context, slog.Level) bool { return true } // every record counts
func (m *modelCalls) WithAttrs(a []slog.Attr) slog.Handler {
	return &modelCalls{next: m.next.WithAttrs(a), count: m.count}
}
func (m *modelCalls) WithGroup(g string) slog.Handler {
	return &modelCalls{next: m.next.WithGroup(g), count: m.count}
}

func (m *modelCalls) Handle(ctx context.Context, r slog.Record) error {
	m.count.add(r)
	if m.next.Enabled(ctx, r.Level) {
		return m.next.Handle(ctx, r)
	}
	return nil
}

// add counts r when it is a /model audit record.
func (m *callCount) add(r slog.Record) {
	var route string
	var d time.Duration
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "route":
			route = a.Value.String()
		case "duration":
			d = a.Value.Duration()
		}
		return true
	})
	if route == wire.RouteModel {
		m.mu.Lock()
		m.n, m.d = m.n+1, m.d+d
		m.mu.Unlock()
	}
}

func (m *modelCalls) reset() {
	m.count.mu.Lock()
	defer m.count.mu.Unlock()
	m.count.n, m.count.d = 0, 0
}

func (m *modelCalls) get() (int, time.Duration) {
	m.count.mu.Lock()
	defer m.count.mu.Unlock()
	return m.count.n, m.count.d
}
