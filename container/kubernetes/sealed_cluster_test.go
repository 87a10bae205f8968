package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

// fakeAttacher plays the worker's process of a kwok Pod (where nothing
// runs): Attach calls play with the attach's streams, the stdin teed so
// that the test can read the hello the engine sent.
type fakeAttacher struct {
	play func(ctx context.Context, pod *corev1.Pod, s Streams) error

	mu    sync.Mutex
	stdin bytes.Buffer
	pods  []*corev1.Pod
}

func (a *fakeAttacher) Attach(ctx context.Context, pod *corev1.Pod, s Streams) error {
	a.mu.Lock()
	a.pods = append(a.pods, pod)
	a.mu.Unlock()
	s.Stdin = io.TeeReader(s.Stdin, lockedWriter{&a.mu, &a.stdin})
	return a.play(ctx, pod, s)
}

// hello is the broker hello the engine wrote first on the worker's stdin.
func (a *fakeAttacher) hello(t *testing.T) wire.BrokerHello {
	t.Helper()
	a.mu.Lock()
	raw := bytes.Clone(a.stdin.Bytes())
	a.mu.Unlock()
	h, err := wire.ReadBrokerHello(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("stdin began with no hello: %v", err)
	}
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// turnBroker stands in for a sealed turn's broker on its Unix socket in
// the run directory: it answers the model route with content and records
// each request's header names, which must be exactly the worker's (the
// relay adds none and the listener removed the token).
type turnBroker struct {
	mu      sync.Mutex
	headers [][]string
}

func (b *turnBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var names []string
	for k := range r.Header {
		names = append(names, strings.ToLower(k))
	}
	slices.Sort(names)
	b.mu.Lock()
	b.headers = append(b.headers, names)
	b.mu.Unlock()
	if r.URL.Path != wire.RouteModel || r.Host != wire.BrokerHost {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	io.Copy(io.Discard, r.Body)
	msg := map[string]any{"role": "assistant", "content": "**Hello** from the `pod`: \"quoted\"\n- a list"}
	json.NewEncoder(w).Encode(map[string]any{"id": "c", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}}})
}

// sealedRig is a Sealed engine on the test cluster with its broker's
// network listener on loopback and a turn broker on a socket in a run
// directory.
type sealedRig struct {
	c      *k8stest.Cluster
	e      *Sealed
	att    *fakeAttacher
	tb     *turnBroker
	runDir string
	listen *broker.Server
}

func newSealedRig(t testing.TB, play func(ctx context.Context, pod *corev1.Pod, s Streams) error) *sealedRig {
	t.Helper()
	c := k8stest.Require(t)
	tokens := broker.NewTokens()
	ln, err := broker.ListenNet("127.0.0.1:0", tokens, broker.NetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := clusterOptions(t, c)
	o.Broker = netip.MustParseAddrPort(ln.Addr().String())
	att := &fakeAttacher{play: play}
	e, err := NewSealed(c.Clientset.CoreV1(), att, tokens, "", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r := &sealedRig{c: c, e: e, att: att, tb: &turnBroker{}, runDir: t.TempDir(), listen: ln}
	r.serveBroker(t, r.runDir)
	return r
}

// serveBroker serves the rig's turn broker on a socket in runDir, as the
// sealed runtime makes a turn's (in a warm worker's run dir: at its claim).
func (r *sealedRig) serveBroker(t testing.TB, runDir string) {
	t.Helper()
	sock, err := net.Listen("unix", filepath.Join(runDir, "broker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.tb}
	go srv.Serve(sock)
	t.Cleanup(func() { srv.Close() })
}

func (r *sealedRig) spec(t testing.TB) container.Spec {
	spec := testSpec(t)
	spec.RunDir = r.runDir
	return spec
}

// turnInput is a minimal valid sealed turn.
func turnInput(t testing.TB) []byte {
	t.Helper()
	b, err := jsonjs.Marshal(wire.Turn{
		Text: "hi", Speaker: wire.TurnSpeaker{ID: "u1", Name: "U1"},
		Model: "test-model", Prompt: "Assist the guests.", TimeZone: "UTC",
		Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{},
		Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// realWorker runs the worker's own code on the attach's streams, as
// `rtsandbox-worker --broker-from-stdin` does in the Pod.
func realWorker(ctx context.Context, _ *corev1.Pod, s Streams) error {
	worker.Run(ctx, worker.Options{Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr, HelloFirst: true})
	return nil
}

// TestClusterSealedTurn: a sealed turn through the engine: a fresh Pod,
// the hello and the turn on its stdin, the worker's broker calls through
// the network listener with its token and the relay to the turn's socket
// (the headers unchanged), the early reply, the Pod deleted after. The
// token is in no field of the Pod, and is refused once the turn is over
// (a replay).
func TestClusterSealedTurn(t *testing.T) {
	r := newSealedRig(t, realWorker)
	ctx := clusterCtx(t)
	res, err := r.e.Run(ctx, r.spec(t), turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, res.StderrTail)
	}
	if !strings.HasPrefix(res.Reply.Text, "**Hello** from the `pod`") || !res.Reply.OK {
		t.Errorf("reply %+v", res.Reply)
	}
	if res.Settled == nil || res.Replied.IsZero() || res.Started.IsZero() {
		t.Errorf("not an early reply: %+v", res)
	}
	for _, h := range r.tb.headers {
		if want := []string{"authorization", "content-length", "content-type"}; !slices.Equal(h, want) {
			t.Errorf("the turn's broker saw headers %v; want %v", h, want)
		}
	}
	if len(r.tb.headers) == 0 {
		t.Error("the worker never reached the turn's broker")
	}
	hello := r.att.hello(t)
	pod := r.att.pods[0]
	raw, _ := json.Marshal(pod)
	if bytes.Contains(raw, []byte(hello.Token)) {
		t.Error("the token is in the Pod's object")
	}
	<-res.Settled
	if _, err := r.c.Clientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Pod after the turn: %v; want not found", err)
	}
	// A replay of the turn's token after the turn: the one refusal.
	cl := brokerclient.Client{Network: &brokerclient.Network{Addr: hello.Broker, Token: hello.Token}}
	var se *brokerclient.StatusError
	if _, err := cl.Post(ctx, wire.RouteModel, []byte(`{}`)); !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("replay after the turn = %v; want 401", err)
	}
}

// TestClusterSealedWorkerFails: a worker that prints the failure reply and
// exits 1 (kwok ends its container so) fails its turn with
// ErrWorkerFailed as soon as the Pod's watch reports the exit, with its
// stderr tail kept, and its Pod is deleted.
func TestClusterSealedWorkerFails(t *testing.T) {
	var r *sealedRig
	r = newSealedRig(t, func(ctx context.Context, pod *corev1.Pod, s Streams) error {
		io.Copy(io.Discard, s.Stdin)
		fmt.Fprint(s.Stderr, `{"error_class":"broker_unreachable","detail":"broker call failed"}`+"\n")
		fmt.Fprint(s.Stdout, `{"ok":false,"text":"`+rtsandbox.WorkerFailedText+`"}`)
		failPod(t, ctx, r.c, pod)
		return nil
	})
	ctx := clusterCtx(t)
	began := time.Now()
	res, err := r.e.Run(ctx, r.spec(t), turnInput(t))
	if !errors.Is(err, container.ErrWorkerFailed) || res.ExitCode != 1 {
		t.Fatalf("Run = %d, %v; want exit 1, ErrWorkerFailed", res.ExitCode, err)
	}
	if !bytes.Contains(res.StderrTail, []byte("broker_unreachable")) {
		t.Errorf("stderr tail %q", res.StderrTail)
	}
	if res.Removed.IsZero() && !res.CleanupPending {
		t.Errorf("the Pod neither removed nor pending: %+v", res)
	}
	t.Logf("failed turn took %v", time.Since(began))
}

// TestClusterSealedDeadline: a worker that never answers is cut at the
// turn's deadline (plus at most about a second), and its Pod is deleted.
func TestClusterSealedDeadline(t *testing.T) {
	r := newSealedRig(t, func(ctx context.Context, _ *corev1.Pod, _ Streams) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(clusterCtx(t), 3*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	res, err := r.e.Run(ctx, r.spec(t), turnInput(t))
	if !errors.Is(err, container.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want ErrAborted wrapping the deadline", err)
	}
	if late := time.Since(deadline); late > 1500*time.Millisecond {
		t.Errorf("Run returned %v after the deadline", late)
	}
	if res.Removed.IsZero() && !res.CleanupPending {
		t.Errorf("the Pod neither removed nor pending: %+v", res)
	}
}

// TestClusterSealedStreamEndedWithoutExit: a worker whose stream ends
// without its reply's end mark (a failure reply) while its Pod never
// reports an exit fails its turn at the deadline with ErrAborted, and the
// result carries the failure line it wrote on stderr, for the operator.
func TestClusterSealedStreamEndedWithoutExit(t *testing.T) {
	const line = `{"error_class":"model","detail":"model call failed"}`
	r := newSealedRig(t, func(_ context.Context, _ *corev1.Pod, s Streams) error {
		io.Copy(io.Discard, s.Stdin)
		io.WriteString(s.Stderr, line+"\n")
		io.WriteString(s.Stdout, `{"ok":false,"text":"x"}`)
		return nil // kwok keeps the Pod running: no exit is ever seen
	})
	ctx, cancel := context.WithTimeout(clusterCtx(t), 2*time.Second)
	defer cancel()
	res, err := r.e.Run(ctx, r.spec(t), turnInput(t))
	if !errors.Is(err, container.ErrAborted) || !strings.Contains(err.Error(), "after its stream ended") {
		t.Fatalf("Run = %v; want ErrAborted after the stream ended", err)
	}
	if !strings.Contains(string(res.StderrTail), line) {
		t.Errorf("StderrTail = %q; want the worker's failure line", res.StderrTail)
	}
}
