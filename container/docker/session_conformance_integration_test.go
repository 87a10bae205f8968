package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/runtimetest"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/wire"
)

// conversationFile is the stand-in conversation a session worker keeps
// under its workspace's sessions/ (what StartFresh archives).
const conversationFile = "conformance.jsonl"

// TestIntegrationSessionRuntimeConformance runs the runtime interface's
// conformance suite against the session runtime on the real driver: one
// real long-lived container per channel, and per channel a stand-in
// broker that is ready while that container runs and answers, fails or
// never answers by the turn's text. Like the real worker, the stand-in
// keeps the conversation in the workspace's sessions/, so a turn
// continued one when that file was there.
func TestIntegrationSessionRuntimeConformance(t *testing.T) {
	needDocker(t)
	const ok, fail, hang, answer = "conformance-ok", "conformance-fail", "conformance-hang", "Session answer."
	party, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(party) })
	d := newSessionDriver(integ.cli)
	var (
		rt        *session.Runtime
		continued atomic.Bool
		channels  []rtsandbox.ChannelKey
	)
	converse := func(ch rtsandbox.ChannelKey, turn wire.SessionTurn) (wire.SessionResult, error) {
		dir, err := rt.SessionsDir(ch)
		if err != nil {
			return wire.SessionResult{}, err
		}
		file := filepath.Join(dir, conversationFile)
		_, err = os.Stat(file)
		continued.Store(err == nil)
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return wire.SessionResult{}, err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%q\n", turn.Text)
		return wire.SessionResult{OK: true, Text: answer}, err
	}
	newBroker := func(ch rtsandbox.ChannelKey, _, socketPath string) (session.Broker, error) {
		ln, err := net.Listen("unix", socketPath)
		if err != nil {
			return nil, err
		}
		name := rtcontainer.SessionName(integ.installation, string(ch))
		ready := func() bool {
			st, err := d.Status(context.Background(), name)
			return err == nil && st.State == rtcontainer.StateRunning
		}
		return &standInBroker{ln: ln, ready: ready, answer: func(ctx context.Context, turn wire.SessionTurn) (wire.SessionResult, error) {
			switch turn.Text {
			case hang:
				<-ctx.Done()
				return wire.SessionResult{}, context.Cause(ctx)
			case fail:
				return wire.SessionResult{OK: false, Error: "failed on purpose"}, nil
			}
			return converse(ch, turn)
		}}, nil
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1000, 1000
	}
	// The turn deadline covers a first turn's container start: 2 s was
	// too short for one on a loaded CI machine (Stop's turn after the
	// stopped one's removal timed out).
	const timeout = 5 * time.Second
	rt, err = session.New(session.Options{
		Driver: d, NewBroker: newBroker,
		Profiles:   map[string]session.Profile{"studio": {}},
		ProfileFor: func(rtsandbox.ChannelKey) string { return "studio" },
		PartyDir:   filepath.Join(party, "p"), Image: integ.image, Installation: integ.installation,
		UID: uid, GID: gid, TurnTimeout: timeout, StartTimeout: 30 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		errs := []error{rt.Close(ctx)}
		for _, ch := range channels {
			errs = append(errs, d.Remove(ctx, rtcontainer.SessionName(integ.installation, string(ch))))
		}
		if err := errors.Join(errs...); err != nil {
			t.Error(err)
		}
	})
	runtimetest.Run(t, runtimetest.Harness{
		Runtime: rt, Timeout: timeout,
		Mode: rtsandbox.ModeSession, Profile: "studio",
		Ran: rtsandbox.ContainerRunning, Removed: rtsandbox.ContainerMissing,
		Channel: func() rtsandbox.ChannelKey {
			ch := rtsandbox.ChannelKey("test:" + randomHex(4))
			channels = append(channels, ch)
			return ch
		},
		OK: ok, Fail: fail, Hang: hang, Answer: answer,
		Continued: func(*testing.T) bool { return continued.Load() },
	})
}
