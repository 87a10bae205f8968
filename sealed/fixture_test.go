package sealed

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

const hostKey = "host-key"

// fakeDriver acts like a container: it validates the spec, hands the turn
// to run (which may talk to <RunDir>/broker.sock like the worker does) and
// records what it was given.
type fakeDriver struct {
	run func(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error)
	// stateless keeps a reply without state as it is; otherwise such a
	// reply gets the turn's own state back, as from a worker that changed
	// nothing.
	stateless bool
	// settled, when set, makes every reply an early one: the result's
	// Settled is this channel, which the test closes to "remove" the
	// container.
	settled chan struct{}

	mu     sync.Mutex
	specs  []container.Spec
	stdins [][]byte
}

func (d *fakeDriver) Run(ctx context.Context, spec container.Spec, stdin []byte) (container.Result, error) {
	res := container.Result{Began: time.Now(), ExitCode: -1}
	if err := spec.Validate(); err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
	}
	var turn wire.Turn
	if err := json.Unmarshal(stdin, &turn); err != nil {
		return res, err
	}
	d.mu.Lock()
	d.specs = append(d.specs, spec)
	d.stdins = append(d.stdins, bytes.Clone(stdin))
	d.mu.Unlock()
	res.Created, res.Started = time.Now(), time.Now()
	reply, err := d.run(ctx, spec, turn)
	res.Exited, res.Removed = time.Now(), time.Now()
	if we, ok := errors.AsType[*workerExit](err); ok {
		res.ExitCode, res.StderrTail = we.code, we.stderr
	}
	if err != nil {
		return res, err
	}
	if reply.State == nil && !d.stateless {
		reply.State = &rtsandbox.ChannelState{Memory: turn.Memory, History: turn.History}
	}
	res.Reply, res.ExitCode = reply, 0
	if d.settled != nil {
		res.Settled, res.Exited, res.Removed = d.settled, time.Time{}, time.Time{}
	}
	return res, nil
}

func (d *fakeDriver) Reap(context.Context, string) (int, error) { return 0, nil }

func (d *fakeDriver) gotSpecs() []container.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.specs)
}

func (d *fakeDriver) gotStdins() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.stdins)
}

// runWorker runs the real in-container worker in process, on the turn's
// socket, and judges its output as a driver would.
func runWorker(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
	in, err := json.Marshal(turn)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	var out, errOut bytes.Buffer
	code := worker.Run(ctx, worker.Options{
		Stdin: bytes.NewReader(in), Stdout: &out, Stderr: &errOut,
		Socket: filepath.Join(spec.RunDir, "broker.sock"),
	})
	if code != 0 {
		return rtsandbox.Reply{}, &workerExit{code: code, stderr: errOut.Bytes()}
	}
	return wire.ParseReply(out.Bytes())
}

// workerExit is a failed worker run as the driver reports it: the error is
// ErrWorkerFailed with the exit code; the stderr goes to the Result's tail,
// never into the error text.
type workerExit struct {
	code   int
	stderr []byte
}

func (e *workerExit) Error() string {
	return fmt.Sprintf("%v: exit code %d", container.ErrWorkerFailed, e.code)
}

func (e *workerExit) Unwrap() error { return container.ErrWorkerFailed }

// fixture is a runtime on private short roots with a fake driver and a
// broker whose key getter records its scopes.
type fixture struct {
	t               *testing.T
	base            string
	runRoot, wsRoot string // wsRoot: the legacy workspace root the store migrates from
	stateDir        string // holds the memory database
	state           *memstore.Store
	driver          *fakeDriver
	cfg             broker.Config
	opts            Options
	transport       *http.Transport
	audit           *auditLog
	mu              sync.Mutex
	scopes          []rtsandbox.Binding
	rt              *Runtime
	uid, gid        int
}

// newFixture builds the fixture; edit may change the broker config and
// options before the runtime is built.
func newFixture(t *testing.T, edit func(f *fixture)) *fixture {
	t.Helper()
	return newPlantedFixture(t, nil, edit)
}

// newPlantedFixture is newFixture with plant run before the memory
// database opens, which imports what plant left in the older layouts.
func newPlantedFixture(t *testing.T, plant, edit func(f *fixture)) *fixture {
	t.Helper()
	base := shortTempDir(t)
	f := &fixture{
		t: t, base: base, runRoot: filepath.Join(base, "run"), wsRoot: filepath.Join(base, "ws"),
		stateDir: filepath.Join(base, "state"),
		driver:   &fakeDriver{}, transport: upstream.NewTransport(), audit: &auditLog{},
	}
	f.uid, f.gid = workerIDs()
	f.cfg = broker.Config{
		ModelURL: upstream.MustParseEndpoint("http://127.0.0.1:9/v1/chat/completions", true), Model: "fake",
		APIKey: func(_ context.Context, s rtsandbox.Binding) (rtsandbox.Secret, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.scopes = append(f.scopes, s)
			return hostKey, nil
		},
		Client: upstream.New(f.transport),
		Logger: slog.New(f.audit),
	}
	if plant != nil {
		plant(f)
	}
	state, err := memstore.Open(context.Background(), memstore.Options{Path: filepath.Join(f.stateDir, memstore.FileName),
		LegacyRoot: f.wsRoot, Logger: slog.New(f.audit)})
	if err != nil {
		t.Fatalf("memstore.Open: %v", err)
	}
	t.Cleanup(func() { state.Close() })
	f.state = state
	f.opts = Options{
		Driver: f.driver, Image: "rtsandbox-test:latest", UID: f.uid, GID: f.gid,
		RunRoot: f.runRoot, State: state, Model: "fake", Installation: "test-sandbox",
	}
	if edit != nil {
		edit(f)
	}
	b, err := broker.New(f.cfg)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	f.opts.Broker = b
	rt, err := New(f.opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.rt = rt
	t.Cleanup(func() {
		rt.Close(context.Background())
		f.transport.CloseIdleConnections()
	})
	return f
}

// workerIDs are the worker's uid:gid: the test's own, or 1000:1000 when the
// tests run as root (a root service must name a non-root worker).
func workerIDs() (int, int) {
	if os.Getuid() == 0 {
		return 1000, 1000
	}
	return os.Getuid(), os.Getgid()
}

// shortTempDir keeps Unix socket paths far below 100 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// channels counts the channels whose state the memory database holds.
// say runs a guest's turn "hi" on ch and returns its error alone.
func (f *fixture) say(ch rtsandbox.ChannelKey) error {
	_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}, "hi")
	return err
}

func (f *fixture) channels(t *testing.T) int {
	t.Helper()
	n, err := f.state.Channels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// plantRow writes a memory row straight into the fixture's database, as
// a damaged file or another program could leave it.
func plantRow(t *testing.T, f *fixture, channel rtsandbox.ChannelKey, scope, key, text string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(f.stateDir, memstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO memory (channel, scope, key, text, principal, seq) VALUES (?, ?, ?, ?, '', 1)`,
		memstore.ChannelID(channel), scope, key, text); err != nil {
		t.Fatal(err)
	}
}

// assertNoState checks that the memory database holds no channel.
func (f *fixture) assertNoState(t *testing.T) {
	t.Helper()
	if n := f.channels(t); n != 0 {
		t.Errorf("the memory database holds %d channels; want none", n)
	}
}

func (f *fixture) gotScopes() []rtsandbox.Binding {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.scopes)
}

// entries lists a directory's names; a test fails if it cannot be read.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("%s holds %v; want nothing", dir, got)
	}
}

// hostTool declares a tool whose arguments may be any object.
func hostTool(name string, run rtsandbox.HostToolFunc) broker.Tool {
	return broker.Tool{
		Spec: rtsandbox.ToolSpec{Name: name, Description: "test tool " + name, Parameters: json.RawMessage(`{"type":"object"}`)},
		Impl: run,
	}
}

// brokerPost sends one request the way the worker does: HTTP/1.1 over the
// socket, Host broker, the dummy bearer, a JSON body with its length, and
// no other header.
func brokerPost(ctx context.Context, sock, route, body string) (int, string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", route, wire.DummyKey, len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// mustPost is brokerPost from inside a fake driver.
func mustPost(t *testing.T, ctx context.Context, spec container.Spec, route, body string) (int, string) {
	t.Helper()
	status, answer, err := brokerPost(ctx, filepath.Join(spec.RunDir, "broker.sock"), route, body)
	if err != nil {
		t.Errorf("POST %s: %v", route, err)
	}
	return status, answer
}

// auditLog records the status of every broker audit record.
type auditLog struct {
	mu       sync.Mutex
	statuses []int
	messages []string
}

func (a *auditLog) Enabled(context.Context, slog.Level) bool { return true }
func (a *auditLog) WithAttrs([]slog.Attr) slog.Handler       { return a }
func (a *auditLog) WithGroup(string) slog.Handler            { return a }
func (a *auditLog) Handle(_ context.Context, r slog.Record) error {
	a.mu.Lock()
	a.messages = append(a.messages, r.Message)
	a.mu.Unlock()
	r.Attrs(func(at slog.Attr) bool {
		if at.Key == "status" {
			a.mu.Lock()
			a.statuses = append(a.statuses, int(at.Value.Int64()))
			a.mu.Unlock()
		}
		return true
	})
	return nil
}

// has reports whether a record whose message starts with prefix was
// logged.
func (a *auditLog) has(prefix string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.ContainsFunc(a.messages, func(m string) bool { return strings.HasPrefix(m, prefix) })
}

func (a *auditLog) got() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.statuses)
}

// modelServer is a loopback stand-in for an OpenAI chat-completions
// endpoint: it answers from a script and records every request.
type modelServer struct {
	*httptest.Server
	mu      sync.Mutex
	script  []string
	bodies  []string
	headers []http.Header
}

func newModelServer(t *testing.T, script ...string) *modelServer {
	t.Helper()
	m := &modelServer{script: script}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies = append(m.bodies, string(body))
		m.headers = append(m.headers, r.Header.Clone())
		answer := `{"error":"script used up"}`
		status := http.StatusInternalServerError
		if len(m.script) > 0 {
			answer, m.script, status = m.script[0], m.script[1:], http.StatusOK
		}
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) url() upstream.Endpoint {
	return upstream.MustParseEndpoint(m.URL+"/v1/chat/completions", true)
}

func (m *modelServer) gotBodies() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.bodies)
}

func (m *modelServer) gotHeaders() []http.Header {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.headers)
}

// completion is a chat-completions response whose first choice holds
// content (nil for null) and the given tool calls.
func completion(content any, calls ...map[string]any) string {
	msg := map[string]any{"role": "assistant", "content": content}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	b, err := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": "upstream",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func toolCall(id, name, args string) map[string]any {
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
}

// waitFor polls cond until it holds or 30 seconds pass. The bound is for
// work the engine does on its own (replacing a killed worker starts a
// container): 5 s was too short for that on a loaded 2-core CI machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func speaker(id string) rtsandbox.Speaker {
	return rtsandbox.Speaker{ID: id, Name: strings.ToUpper(id[:1]) + id[1:], PrincipalID: "p_" + id}
}
