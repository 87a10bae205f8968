package docker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/wire"
)

// standInBroker stands for broker.Session in the runtime integration
// test: it listens on the socket path, is ready while the channel's
// container runs (the echo stand-in does not speak the protocol), and
// answers turns with answer.
type standInBroker struct {
	ln     net.Listener
	ready  func() bool
	answer func(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error)
	mu     sync.Mutex
	bound  bool
}

func (b *standInBroker) Bind(context.Context, wire.SessionBinding) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bound {
		return nil, errors.New("Broker turn already active")
	}
	b.bound = true
	return func() { b.mu.Lock(); b.bound = false; b.mu.Unlock() }, nil
}

func (b *standInBroker) Execute(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error) {
	return b.answer(ctx, t)
}
func (b *standInBroker) Ready() bool  { return b.ready() }
func (b *standInBroker) Close() error { return b.ln.Close() }

// standInBrokers is the runtime's NewBroker of stand-in brokers.
func standInBrokers(ready func() bool, answer func(ctx context.Context) (wire.SessionResult, error)) func(channel rtsandbox.ChannelKey, profile, socketPath string) (session.Broker, error) {
	return func(_ rtsandbox.ChannelKey, _, socketPath string) (session.Broker, error) {
		ln, err := net.Listen("unix", socketPath)
		if err != nil {
			return nil, err
		}
		return &standInBroker{ln: ln, ready: ready, answer: func(ctx context.Context, _ wire.SessionTurn) (wire.SessionResult, error) {
			return answer(ctx)
		}}, nil
	}
}

// TestIntegrationSessionRuntime runs the session runtime on the real
// driver: the runtime's directories mount into a real container (handed
// to the worker user when the host is root), a warm second turn keeps the
// container, a hung turn at its deadline saves the container's last log
// lines and removes exactly that container, Close leaves a running
// container in place and Remove removes it.
func TestIntegrationSessionRuntime(t *testing.T) {
	needDocker(t)
	party, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(party) })
	d := newSessionDriver(integ.cli)
	channel := rtsandbox.ChannelKey("test:" + randomHex(4))
	name := rtcontainer.SessionName(integ.installation, string(channel))
	t.Cleanup(func() { _ = d.Remove(context.Background(), name) })
	running := func() bool {
		st, err := d.Status(context.Background(), name)
		return err == nil && st.State == rtcontainer.StateRunning
	}
	var hang sync.Mutex
	hung := false
	answer := func(ctx context.Context) (wire.SessionResult, error) {
		hang.Lock()
		h := hung
		hang.Unlock()
		if h {
			<-ctx.Done()
			return wire.SessionResult{}, context.Cause(ctx)
		}
		return wire.SessionResult{OK: true, Text: "done"}, nil
	}
	var logs syncbuf.Buffer
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1000, 1000
	}
	opts := session.Options{
		Driver:       d,
		NewBroker:    standInBrokers(running, answer),
		Profiles:     map[string]session.Profile{"studio": {}},
		ProfileFor:   func(rtsandbox.ChannelKey) string { return "studio" },
		PartyDir:     filepath.Join(party, "p"),
		Image:        integ.image,
		Installation: integ.installation,
		UID:          uid, GID: gid,
		// The hung turn waits all of it; the others must fit in it on a
		// loaded CI machine (1 s timed out a first turn there).
		TurnTimeout:  5 * time.Second,
		StartTimeout: 30 * time.Second,
		Logger:       slog.New(slog.NewJSONHandler(&logs, nil)),
	}
	rt, err := session.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := rtsandbox.Binding{Channel: channel, Speaker: rtsandbox.Speaker{ID: "a", Name: "A", PrincipalID: "test:a"}}
	ctx := context.Background()
	if reply, err := rt.RunTurn(ctx, b, "hello"); err != nil || reply.Text != "done" {
		t.Fatalf("first turn = %+v, %v", reply, err)
	}
	id := containerID(t, name)
	if reply, err := rt.RunTurn(ctx, b, "again"); err != nil || reply.Text != "done" {
		t.Fatalf("warm turn = %+v, %v", reply, err)
	}
	if containerID(t, name) != id {
		t.Error("the warm turn recreated the container")
	}
	waitLogs(t, d, name, "session worker ready")

	hang.Lock()
	hung = true
	hang.Unlock()
	_, err = rt.RunTurn(ctx, b, "hang")
	if err == nil || err.Error() != "Sandbox turn timed out" {
		t.Fatalf("hung turn = %v; want Sandbox turn timed out", err)
	}
	if running() {
		t.Error("the hung turn's container still runs")
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"sandbox worker log before removal"`) || !strings.Contains(out, "uid="+itoa(uid)) {
		t.Errorf("operator log lacks the worker's last lines:\n%s", out)
	}

	hang.Lock()
	hung = false
	hang.Unlock()
	if _, err := rt.RunTurn(ctx, b, "after"); err != nil {
		t.Fatalf("turn after the removal = %v", err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !running() {
		t.Error("Close stopped the container; it must keep running")
	}
	rt2, err := session.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(ctx)
	if err := rt2.Remove(ctx, channel); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Status(ctx, name); err != nil || st.State != rtcontainer.StateMissing {
		t.Errorf("Status after Remove = %+v, %v", st, err)
	}
}
