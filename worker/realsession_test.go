package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	hostbroker "github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file runs the session worker against the real session broker
// (hostbroker.Session) on a real Unix socket, with the stand-in model behind
// it, where the spec's inventory says "over a real broker socket" (the reference's tests).

// realModelKey is the model credential the real broker swaps in.
const realModelKey = "worker-session-real-key"

// realSession is a listening hostbroker.Session with a running worker.
type realSession struct {
	t      *testing.T
	sess   *hostbroker.Session
	worker *runningWorker
	ws     string
}

// sessionTool is a broker.SessionHostTool answering with answer(input).
type sessionTool struct {
	mu     sync.Mutex
	answer func(input json.RawMessage, b wire.SessionBinding) wire.SessionToolResponse
	calls  []wire.SessionBinding
}

func (s *sessionTool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	return "", io.EOF // session mode calls RunSession
}

func (s *sessionTool) RunSession(_ context.Context, input json.RawMessage, b wire.SessionBinding) (wire.SessionToolResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, b)
	return s.answer(input, b), nil
}

// startRealSession builds a hostbroker.Session for an Anthropic profile with
// the host tools, the stand-in model behind it, and a worker on its
// socket with a fresh workspace (ws, when not "", is reused).
func startRealSession(t *testing.T, model *fakemodel.Server, tools map[string]*sessionTool, ws string, edit func(*hostbroker.SessionConfig)) *realSession {
	t.Helper()
	var specs []rtsandbox.ToolSpec
	var btools []hostbroker.Tool
	for name, impl := range tools {
		spec := rtsandbox.ToolSpec{Name: name, Description: "Recall what a person said.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)}
		specs = append(specs, spec)
		btools = append(btools, hostbroker.Tool{Spec: spec, Impl: impl})
	}
	b, err := hostbroker.New(hostbroker.Config{
		API: rtsandbox.ModelAPIAnthropic, Stream: true,
		ModelURL: upstream.MustParseEndpoint(model.URL(), true), Model: "claude-test",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return realModelKey, nil },
		Tools:  btools,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostbroker.SessionConfig{Broker: b, WorkerImage: "rtsandbox-worker:test", Worker: wire.SessionWorkerConfig{
		ModelAPI: rtsandbox.ModelAPIAnthropic, Model: "claude-test", Stream: true, Prompt: "Be brief.", TimeZone: "UTC",
		Tools: specs, MCP: []wire.MCPServerTools{},
	}}
	if edit != nil {
		edit(&cfg)
	}
	sess, err := hostbroker.NewSession(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "wrs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "broker.sock")
	if err := sess.Listen(sock); err != nil {
		t.Fatal(err)
	}
	if ws == "" {
		ws = t.TempDir()
	}
	r := &realSession{t: t, sess: sess, ws: ws}
	r.worker = startWorkerOn(t, sock, ws)
	t.Cleanup(func() {
		r.worker.stop(t)
		sess.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for !sess.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("worker never ready:\n%s", r.worker.log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

// run binds the turn to its author as the speaker and executes it, as the
// session runtime does.
func (r *realSession) run(turn wire.SessionTurn) (wire.SessionResult, error) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	release, err := r.sess.Bind(ctx, wire.SessionBinding{
		Binding:  rtsandbox.Binding{Channel: "discord:party", Speaker: rtsandbox.Speaker{ID: turn.Author.ID, Name: turn.Author.Name}},
		Thinking: turn.Thinking, Deadline: deadline,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	defer release()
	return r.sess.Execute(ctx, turn)
}

// mustRun runs turn and fails the test unless it answers ok.
func (r *realSession) mustRun(turn wire.SessionTurn) wire.SessionResult {
	r.t.Helper()
	res, err := r.run(turn)
	if err != nil || !res.OK {
		r.t.Fatalf("turn %s: %+v, %v\n%s", turn.TurnID, res, err, r.worker.log.String())
	}
	return res
}
