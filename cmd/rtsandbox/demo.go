package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/sandbox"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// demoKeyEnv names the stand-in model's key inside the demo's own
// environment; it never comes from, or goes to, the real environment.
const demoKeyEnv = "RTSANDBOX_DEMO_MODEL_KEY"

// demoTurns is the scripted conversation: the first turn stores a speaker
// memory through memory_set, the second recalls it in a new container.
var demoTurns = []string{"remember that I drink tea", "what do I drink?"}

// demoStoppedText explains a demo that stopped because its output went
// away (`rtsandbox demo | head -1`).
const demoStoppedText = "rtsandbox demo: stopped, its output was closed; the turns' containers were removed"

// runDemo shows the main job on a fresh machine with Docker and no API
// key: a scripted stand-in model on loopback, the worker image (built if
// missing) and two sealed turns in one channel, each phase timed. When
// stdout is closed the demo cancels its turns, removes what it started
// and exits 1 with one line on stderr.
func runDemo(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox demo", stderr)
	tag := fs.String("image", config.DefaultImage, "worker image; built when missing")
	user := fs.String("user", "", `worker "UID:GID" (default: yours; 65534:65534 when you are root)`)
	logFormat := logFormatFlag(fs, logText)
	if code, ok := parseOpsFlags(fs, args, stderr); !ok {
		return code
	}
	uid, gid, err := demoUser(*user)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox demo:", err)
		return exitUsage
	}
	log, err := newLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox demo:", err)
		return exitUsage
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &stopWriter{w: stdout, stop: cancel}
	err = demo(ctx, out, log, *tag, uid, gid)
	switch {
	case out.failed() != nil:
		fmt.Fprintln(stderr, demoStoppedText)
		log.Debug("demo output failed", "err", out.failed(), "demo_err", err)
		return exitFail
	case err != nil:
		fmt.Fprintln(stderr, "rtsandbox demo:", err)
		return exitFail
	}
	return exitOK
}

func demoUser(spec string) (int, int, error) {
	if spec == "" {
		if os.Geteuid() == 0 {
			return 65534, 65534, nil
		}
		return os.Geteuid(), os.Getegid(), nil
	}
	u, g, ok := strings.Cut(spec, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("--user: %q is not a non-root \"UID:GID\"", spec)
	}
	return uid, gid, nil
}

func demo(ctx context.Context, out io.Writer, log *slog.Logger, tag string, uid, gid int) error {
	const key = "demo-stand-in-key"
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: key, Loop: true}, fakemodel.MemoryDemo())
	defer model.Close()
	fmt.Fprintf(out, "rtsandbox demo\nmodel: a SCRIPTED STAND-IN on %s, not a real LLM (no API key needed)\n", model.URL())

	e, closeClient, err := dockerEngine()
	if err != nil {
		return err
	}
	defer closeClient()
	d := e.Driver
	if err := demoImage(ctx, out, e, tag); err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "rtsdemo") // short: the socket path limit
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	cfg := &config.Config{
		StateDir: state, AllowHTTP: true,
		Model:   config.Model{URL: model.ChatURL(), Name: "scripted-stand-in", APIKeyEnv: demoKeyEnv},
		Sandbox: config.Sandbox{Image: tag, UID: uid, GID: gid, TimeZone: "UTC"},
	}
	calls := &modelCalls{next: log.Handler(), count: &callCount{}}
	var stats sandbox.TurnStats
	s, err := newSealedRuntime(cfg, func(k string) string {
		if k == demoKeyEnv {
			return key
		}
		return ""
	}, sealedOptions{driver: d, log: slog.New(calls), onTurn: func(ts sandbox.TurnStats) { stats = ts }})
	if err != nil {
		return err
	}
	defer s.close()
	return demoConversation(ctx, out, s, calls, &stats)
}

// demoImage builds the image when it is missing and rebuilds it when it
// holds another worker than this binary's, saying which.
func demoImage(ctx context.Context, out io.Writer, e *engine, tag string) error {
	r, err := ensureImage(ctx, e, tag)
	if err != nil {
		return err
	}
	switch r.State {
	case workerimage.Missing:
		fmt.Fprintf(out, "image: built %s in %s\n", tag, r.took.Round(time.Millisecond))
	case workerimage.Stale:
		fmt.Fprintf(out, "image: %s\n", r)
	default:
		fmt.Fprintf(out, "image: %s (already built)\n", tag)
	}
	return nil
}

func demoConversation(ctx context.Context, out io.Writer, s *sealedRuntime, calls *modelCalls, stats *sandbox.TurnStats) error {
	speaker := rtsandbox.Speaker{ID: "guest", Name: "Guest", PrincipalID: "demo:guest"}
	var last rtsandbox.Reply
	for i, text := range demoTurns {
		if err := ctx.Err(); err != nil { // stopped (its output closed, a signal): no further turn
			return fmt.Errorf("turn %d: %w", i+1, err)
		}
		calls.reset()
		fmt.Fprintf(out, "\nturn %d (a new sealed container)\n  guest: %s\n", i+1, text)
		reply, err := s.rt.RunTurn(ctx, rtsandbox.Binding{Channel: "demo:lobby", Speaker: speaker, Tier: rtsandbox.TierMember}, text)
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

func printPhases(out io.Writer, st sandbox.TurnStats, calls *modelCalls) {
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
	phase("reply", st.Exited)
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
	if route == rtsandbox.RouteModel {
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
