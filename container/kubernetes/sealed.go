package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	sandboxclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Sealed is the Kubernetes engine of the sealed mode, a container.OneShot:
// one fresh Pod per turn, created under the turn's spec, attached to, and
// deleted after its one turn.
//
// The turn's broker stays where the sealed runtime puts it, on a Unix
// socket in the spec's run directory on the host. Run issues a fresh token
// on the broker's network listener for a Relay to that socket,
// writes the listener's address and the token (wire.BrokerHello) and then
// the turn on the worker's stdin through the attach stream, and revokes
// the token when the turn returns. So every broker rule is the socket's,
// unchanged; the token only replaces the bind mount as the way in.
type Sealed struct {
	pods   *Pods
	claims *Claims // nil: every turn in a Pod of its own
	attach Attacher
	tokens *broker.Tokens
	hello  wire.BrokerHello // the listener's address and CA; the token is each turn's

	core     corev1client.CoreV1Interface
	removals atomic.Int64 // deletions under way
	mu       sync.Mutex
	closed   bool
	live     map[string]bool // the Pods and claims of turns under way
	removing sync.WaitGroup
}

var _ container.OneShot = (*Sealed)(nil)

// removeWait is how long Run waits for a Pod's deletion to be confirmed
// before it returns with Result.CleanupPending and goes on in the
// background: the deadline rule's "plus at most about a second".
const removeWait = time.Second

// backgroundRemove bounds a deletion that goes on after Run returned.
const backgroundRemove = time.Minute

// NewSealed is the sealed engine of o's installation through core, the
// core/v1 client (a clientset's CoreV1()), attaching through attach and
// issuing tokens on tokens, the table of the broker's network listener at
// o.Broker. ca is the PEM certificate the listener's TLS certificate
// chains to, "" when it speaks plain TCP. Errors wrap
// container.ErrInvalidSpec.
func NewSealed(core corev1client.CoreV1Interface, attach Attacher, tokens *broker.Tokens, ca string, o Options) (*Sealed, error) {
	pods, err := NewPods(core, o)
	if err != nil {
		return nil, err
	}
	return &Sealed{core: core, pods: pods, attach: attach, tokens: tokens, live: map[string]bool{},
		hello: wire.BrokerHello{Broker: pods.o.Broker.String(), CA: ca}}, nil
}

// brokerSocket is the broker's socket in a turn's run directory.
func brokerSocket(runDir string) string {
	return filepath.Join(runDir, path.Base(wire.BrokerSocketPath))
}

// Run runs spec's worker in a fresh Pod and returns its reply, as
// container.OneShot.Run describes.
func (e *Sealed) Run(ctx context.Context, spec container.Spec, input []byte) (container.Result, error) {
	res := container.Result{Began: time.Now(), ExitCode: -1}
	if err := e.track(spec.Name); err != nil {
		return res, err
	}
	defer e.removing.Done()
	pod, err := SealedPod(spec, e.pods.o)
	if err != nil {
		e.untrack(spec.Name)
		return res, err
	}
	stdin, end, err := e.turnInput(ctx, spec.RunDir, input)
	if err != nil {
		e.untrack(spec.Name)
		return res, err
	}
	defer end()

	w, err := e.start(ctx, spec, pod)
	w.name = spec.Name
	if w.pod != nil {
		res.Created = w.pod.CreationTimestamp.Time
	}
	if err != nil {
		return e.cleanup(w, res, err)
	}
	res.Started = time.Now()
	a := e.open(ctx, w.pod)
	a.send(stdin)
	return e.turn(ctx, w, a, res)
}

// turnInput is the worker's stdin for one turn: the broker hello with a
// fresh token for a relay to the broker's socket in runDir, then input.
// end revokes the token and closes the relay once the turn is over.
// Errors: container.ErrInvalidSpec.
func (e *Sealed) turnInput(ctx context.Context, runDir string, input []byte) (stdin []byte, end func(), err error) {
	relay := NewRelay(brokerSocket(runDir))
	tok, revoke := e.tokens.Issue(ctx, relay)
	end = func() { revoke(); relay.Close() }
	h := e.hello
	h.Token = tok.Reveal()
	stdin, err = wire.AppendBrokerHello(make([]byte, 0, len(input)+512), h)
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("%w: %w", container.ErrInvalidSpec, err)
	}
	return append(stdin, input...), end, nil
}

// UseClaims serves the turns c.Serves from c's warm pool from now on.
// Call it before the first Run.
func (e *Sealed) UseClaims(c *Claims) { e.claims = c }

// start gives the turn its running worker: a claim on the warm pool when
// the turn's Pod would be the pool's, a Pod of its own otherwise.
func (e *Sealed) start(ctx context.Context, spec container.Spec, pod *corev1.Pod) (turnPod, error) {
	if e.claims != nil && e.claims.Serves(spec) {
		cl, err := e.claims.Claim(ctx, spec.Name)
		return turnPod{pod: cl.pod, claim: cl.name}, err
	}
	running, err := e.pods.Start(ctx, pod)
	return turnPod{pod: running}, err
}

// turnPod is a turn's Pod, and its claim when the pool served it.
type turnPod struct {
	name  string // the turn's: its own Pod's, or its claim's
	pod   *corev1.Pod
	claim string
}

// track counts a run for Close and spares its name (its own Pod's, or
// its claim's) from Reap until its removal ends; a closed engine refuses
// it.
func (e *Sealed) track(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: engine closed", container.ErrEngine)
	}
	e.live[name] = true
	e.removing.Add(1)
	return nil
}

// untrack ends the sparing of name, once its removal ended.
func (e *Sealed) untrack(name string) {
	e.mu.Lock()
	delete(e.live, name)
	e.mu.Unlock()
}

// owned reports a name of a turn under way.
func (e *Sealed) owned(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live[name]
}

// attachEnd is what ended an attach: its error, once the stream closed.
type attachEnd struct{ err error }

// exitEnd is the worker's end as the Pod's watch reported it.
type exitEnd struct {
	code int
	err  error
}

// attachment is one attach to a running worker's Pod and the watch of
// the Pod's end: the worker's stdin (a pipe a turn writes once), the sinks
// of its output, and how each ended. A cold turn opens it with its input
// at once; a warm worker opens it at its prestart and is sent its input
// at its claim, so the claim pays no API round trip.
type attachment struct {
	stdin    *io.PipeWriter
	opened   chan struct{} // closed at the attach's first read of stdin: its stream is up
	ended    chan struct{} // closed once the attach or the watch ended
	out      *container.ReplyBuffer
	errOut   *container.TailBuffer
	cancel   context.CancelFunc // ends the attach and the watch
	attached chan attachEnd     // the attach's end, sent once
	exited   chan exitEnd       // the watch's end, sent once
}

// errAttachEnded is what a read of stdin gets once its attach returned.
var errAttachEnded = errors.New("attach ended")

// open attaches to pod and follows its end (a watch, never a poll) until
// ctx ends or the attachment is cancelled.
func (e *Sealed) open(ctx context.Context, pod *corev1.Pod) *attachment {
	actx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	a := &attachment{stdin: pw, opened: make(chan struct{}), ended: make(chan struct{}),
		out: container.NewReplyBuffer(), errOut: container.NewTailBuffer(), cancel: cancel,
		attached: make(chan attachEnd, 1), exited: make(chan exitEnd, 1)}
	var once sync.Once
	end := func() { once.Do(func() { close(a.ended) }) }
	// The executor's copy of stdin outlives its stream, and a turn's
	// write waits for a reader: both end with the attachment, whichever
	// ends it.
	closeStdin := func() { pr.CloseWithError(errAttachEnded) }
	context.AfterFunc(actx, closeStdin)
	go func() {
		defer end()
		err := e.attach.Attach(actx, pod, Streams{Stdin: &gate{r: pr, opened: a.opened}, Stdout: a.out, Stderr: a.errOut})
		closeStdin()
		// An output bound is the sinks' to tell: the stream words their
		// error its own way. They are done writing once Attach returned.
		if over := errors.Join(a.out.Err(), a.errOut.Err()); over != nil {
			err = over
		}
		a.attached <- attachEnd{err}
	}()
	go func() {
		defer end()
		code, err := e.pods.Exit(actx, pod.Name, pod.UID)
		a.exited <- exitEnd{code, err}
	}()
	return a
}

// send writes the worker's stdin and closes it (the worker reads its turn
// to EOF). It never blocks the turn: a write the attach does not take
// ends with the attach.
func (a *attachment) send(stdin []byte) {
	go func() {
		_, err := a.stdin.Write(stdin)
		a.stdin.CloseWithError(err)
	}()
}

// stop ends the attach and the watch, and returns how each ended.
func (a *attachment) stop() (attachEnd, exitEnd) {
	a.cancel()
	return <-a.attached, <-a.exited
}

// gate is an attach's stdin: it closes opened at the first Read, which
// client-go's executors (WebSocket and SPDY) make only once the stream and
// its channels are up.
type gate struct {
	r      io.Reader
	once   sync.Once
	opened chan struct{}
}

func (g *gate) Read(p []byte) (int, error) {
	g.once.Do(func() { close(g.opened) })
	return g.r.Read(p)
}

// turn reads the reply of the worker a is attached to, whose stdin was
// sent: at the end mark (the early reply), or at the worker's exit. The
// cold path and a warm worker's claim share it.
func (e *Sealed) turn(ctx context.Context, w turnPod, a *attachment, res container.Result) (container.Result, error) {
	defer a.cancel()

	var stream attachEnd
	select {
	case <-a.out.Ended():
		res.Replied = time.Now()
		a.stop()
		return e.early(w, a.out.Reply(), res)
	case <-ctx.Done():
		a.stop()
		return e.cleanup(w, res, fmt.Errorf("%w: waiting for the worker's reply: %w", container.ErrAborted, context.Cause(ctx)))
	case stream = <-a.attached:
	case end := <-a.exited:
		// The worker ended: its last output is still on the way.
		select {
		case stream = <-a.attached:
		case <-time.After(removeWait):
			a.cancel()
			stream = <-a.attached
		}
		res.ExitCode, res.Exited = end.code, time.Now()
		a.cancel()
		return e.settle(w, a.out, a.errOut, stream, end, res)
	}
	// The stream ended first. A worker writes its end mark before its
	// stream ends, and a select that found both ready took either: the
	// reply is early all the same. Waiting for the exit instead would
	// cost the exit's report, and on kwok, whose Pods never exit, the
	// whole deadline.
	select {
	case <-a.out.Ended():
		res.Replied = time.Now()
		a.cancel()
		<-a.exited
		return e.early(w, a.out.Reply(), res)
	default:
	}
	// The worker exited (or the stream broke, or its output went over a
	// bound); the watch tells which.
	if errors.Is(stream.err, container.ErrOutputLimit) {
		a.cancel()
		<-a.exited
		return e.cleanup(w, res, stream.err)
	}
	var end exitEnd
	select {
	case end = <-a.exited:
	case <-ctx.Done():
		a.cancel()
		<-a.exited
		// The stream has ended, so its stderr is whole: the worker's
		// failure line, if it wrote one, tells the operator why.
		res.StderrTail = a.errOut.Tail()
		return e.cleanup(w, res, fmt.Errorf("%w: waiting for the worker's exit after its stream ended: %w", container.ErrAborted, context.Cause(ctx)))
	}
	res.ExitCode, res.Exited = end.code, time.Now()
	return e.settle(w, a.out, a.errOut, stream, end, res)
}

// early finishes a turn at its end mark: the reply counts, and the Pod is
// deleted in the background; Result.Settled closes once it is gone.
func (e *Sealed) early(w turnPod, reply []byte, res container.Result) (container.Result, error) {
	settled := make(chan struct{})
	res.Settled = settled
	r, err := wire.ParseReply(reply)
	e.removing.Add(1)
	go func() {
		defer e.removing.Done()
		defer close(settled)
		_ = e.remove(w) // the reaper removes what this missed
	}()
	if err != nil {
		return res, fmt.Errorf("%w: %w", container.ErrInvalidReply, err)
	}
	res.ExitCode = 0
	res.Reply = r
	return res, nil
}

// settle decides a turn whose worker ended: exit code 0 and a valid reply
// (with or without the end mark) is the reply; anything else its class.
// The Pod is deleted either way.
func (e *Sealed) settle(w turnPod, out *container.ReplyBuffer, errOut *container.TailBuffer, stream attachEnd, end exitEnd, res container.Result) (container.Result, error) {
	res.StderrBytes = errOut.Len()
	var err error
	switch {
	case end.err != nil:
		err = end.err
	case errors.Is(stream.err, container.ErrOutputLimit):
		err = stream.err
	case end.code != 0:
		err = fmt.Errorf("%w: exit code %d", container.ErrWorkerFailed, end.code)
	}
	if err != nil {
		res.StderrTail = errOut.Tail()
		return e.cleanup(w, res, err)
	}
	reply := out.Reply()
	if reply == nil {
		reply = out.Bytes()
	}
	r, perr := wire.ParseReply(reply)
	res, cerr := e.cleanup(w, res, nil)
	if perr != nil {
		return res, errors.Join(fmt.Errorf("%w: %w", container.ErrInvalidReply, perr), cerr)
	}
	if cerr != nil {
		return res, cerr
	}
	res.Reply = r
	return res, nil
}

// remove releases w's claim, if any, and deletes its Pod by UID at once,
// within backgroundRemove.
func (e *Sealed) remove(w turnPod) error {
	e.removals.Add(1)
	defer e.removals.Add(-1)
	defer e.untrack(w.name)
	ctx, cancel := context.WithTimeout(context.Background(), backgroundRemove)
	defer cancel()
	var errs []error
	if w.claim != "" {
		errs = append(errs, e.claims.Release(ctx, w.claim))
	}
	if w.pod != nil && w.pod.UID != "" {
		errs = append(errs, e.pods.Delete(ctx, w.pod.Name, w.pod.UID))
	}
	return errors.Join(errs...)
}

// cleanup removes w (nothing when nothing was created) and returns res
// with cause: confirmed within removeWait, or CleanupPending with the
// removal going on in the background (Settled closes when it ends).
func (e *Sealed) cleanup(w turnPod, res container.Result, cause error) (container.Result, error) {
	if w.claim == "" && (w.pod == nil || w.pod.UID == "") {
		e.untrack(w.name)
		return res, cause
	}
	done := make(chan error, 1)
	gone := make(chan struct{})
	e.removing.Add(1)
	go func() {
		defer e.removing.Done()
		defer close(gone)
		done <- e.remove(w)
	}()
	select {
	case err := <-done:
		if err != nil {
			return res, errors.Join(cause, fmt.Errorf("%w: %w", container.ErrCleanup, err))
		}
		res.Removed = time.Now()
	case <-time.After(removeWait):
		res.CleanupPending, res.Settled = true, gone
	}
	return res, cause
}

// Reap deletes every sealed worker Pod and claim of installation, which
// must be the engine's own, but those of its turns under way (and the warm
// pool's, which the controller owns): a crash's leftovers, at start, at
// shutdown and periodically. Errors: container.ErrInvalidSpec,
// container.ErrEngine, container.ErrCleanup.
func (e *Sealed) Reap(ctx context.Context, installation string) (int, error) {
	if installation != e.pods.o.Installation {
		return 0, fmt.Errorf("%w: installation %q is not this engine's", container.ErrInvalidSpec, installation)
	}
	var claims int
	var err error
	if e.claims != nil {
		claims, err = e.claims.Reap(ctx, e.owned)
	}
	n, perr := e.pods.Reap(ctx, container.RoleTurn, e.owned)
	return n + claims, errors.Join(err, perr)
}

// Close refuses new runs and waits for the deletions under way.
func (e *Sealed) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.removing.Wait()
	return nil
}

// NewClaims is the warm pool name of size workers under spec among the
// engine's Pods (the package's NewClaims); UseClaims puts it in service.
func (e *Sealed) NewClaims(ext extclient.Interface, sbx sandboxclient.Interface, name string, size int32, spec container.Spec) (*Claims, error) {
	return NewClaims(ext, sbx, e.pods, name, size, spec)
}

// Pending counts the deletions under way (a metric's gauge).
func (e *Sealed) Pending() int { return int(e.removals.Load()) }

// Ping asks the API server its version, within ctx: the engine's
// readiness.
func (e *Sealed) Ping(ctx context.Context) (string, error) {
	raw, err := e.core.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("%w: %w", container.ErrEngine, err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%w: version: %w", container.ErrEngine, err)
	}
	return v.GitVersion, nil
}
