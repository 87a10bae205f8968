package docker

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// fakeEngine scripts the engine calls the driver makes. Its "container"
// runs worker in a goroutine on start, fed through a real Unix socket pair
// so that closing the write side gives the worker EOF as with the daemon.
type fakeEngine struct {
	worker     func(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int
	createErr  error
	removeErrs []error // results of successive remove calls; nil after
	// hang makes every call block until its context ends, like an engine
	// that accepts connections and never answers.
	hang atomic.Bool
	// removeFn, when set, answers remove calls instead of removeErrs.
	removeFn func(ctx context.Context, ref string) error
	// list is what ContainerList returns.
	list []container.Summary
	// createGate, when set, makes create finish in the "engine" only
	// once it is closed, whether or not the caller still waits: a client
	// that gives up on a create does not stop the daemon's. existing
	// then holds the containers created and not removed, by name.
	createGate chan struct{}
	existing   map[string]bool

	mu       sync.Mutex
	calls    []fakeCall
	server   net.Conn
	exit     chan int
	killed   chan struct{}
	killOnce sync.Once
}

type fakeCall struct {
	op, ref string
	at      time.Time
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{exit: make(chan int, 1), killed: make(chan struct{})}
}

// block waits while the engine hangs, until ctx ends.
func (f *fakeEngine) block(ctx context.Context) error {
	for f.hang.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func (f *fakeEngine) record(op, ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{op: op, ref: ref, at: time.Now()})
}

// ops returns the operations in call order.
func (f *fakeEngine) ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.op)
	}
	return out
}

func (f *fakeEngine) callsOf(op string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeEngine) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	f.record("create", o.Name)
	if f.createGate != nil {
		done := make(chan struct{})
		go func() {
			<-f.createGate
			f.mu.Lock()
			f.existing[o.Name] = true
			f.mu.Unlock()
			close(done)
		}()
		select {
		case <-done:
			return client.ContainerCreateResult{ID: "id-" + o.Name}, nil
		case <-ctx.Done():
			return client.ContainerCreateResult{}, ctx.Err()
		}
	}
	if err := f.block(ctx); err != nil {
		return client.ContainerCreateResult{}, err
	}
	if f.createErr != nil {
		return client.ContainerCreateResult{}, f.createErr
	}
	return client.ContainerCreateResult{ID: "id-" + o.Name}, nil
}

func (f *fakeEngine) ContainerAttach(_ context.Context, id string, _ client.ContainerAttachOptions) (client.ContainerAttachResult, error) {
	f.record("attach", id)
	clientSide, serverSide, err := unixPair()
	if err != nil {
		return client.ContainerAttachResult{}, err
	}
	f.server = serverSide
	return client.ContainerAttachResult{HijackedResponse: client.NewHijackedResponse(clientSide, "")}, nil
}

func (f *fakeEngine) ContainerWait(ctx context.Context, id string, _ client.ContainerWaitOptions) client.ContainerWaitResult {
	f.record("wait", id)
	res, errc := make(chan container.WaitResponse), make(chan error, 1)
	go func() {
		select {
		case code := <-f.exit:
			res <- container.WaitResponse{StatusCode: int64(code)}
		case <-ctx.Done():
			errc <- ctx.Err()
		}
	}()
	return client.ContainerWaitResult{Result: res, Error: errc}
}

func (f *fakeEngine) ContainerStart(_ context.Context, id string, _ client.ContainerStartOptions) (client.ContainerStartResult, error) {
	f.record("start", id)
	go func() {
		defer f.server.Close()
		out := frameWriter{w: f.server, stream: stdcopy.Stdout}
		errw := frameWriter{w: f.server, stream: stdcopy.Stderr}
		code := f.worker(f.killed, f.server, out, errw)
		f.exit <- code
	}()
	return client.ContainerStartResult{}, nil
}

func (f *fakeEngine) ContainerKill(ctx context.Context, ref string, _ client.ContainerKillOptions) (client.ContainerKillResult, error) {
	f.record("kill", ref)
	if err := f.block(ctx); err != nil {
		return client.ContainerKillResult{}, err
	}
	f.killOnce.Do(func() { close(f.killed) })
	return client.ContainerKillResult{}, nil
}

func (f *fakeEngine) ContainerRemove(ctx context.Context, ref string, _ client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	f.record("remove", ref)
	if err := f.block(ctx); err != nil {
		return client.ContainerRemoveResult{}, err
	}
	if f.removeFn != nil {
		err := f.removeFn(ctx, ref)
		if err == nil {
			f.killOnce.Do(func() { close(f.killed) })
		}
		return client.ContainerRemoveResult{}, err
	}
	f.killOnce.Do(func() { close(f.killed) })
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.existing, ref)
	if len(f.removeErrs) == 0 {
		return client.ContainerRemoveResult{}, nil
	}
	err := f.removeErrs[0]
	f.removeErrs = f.removeErrs[1:]
	return client.ContainerRemoveResult{}, err
}

func (f *fakeEngine) ContainerList(ctx context.Context, _ client.ContainerListOptions) (client.ContainerListResult, error) {
	f.record("list", "")
	if err := f.block(ctx); err != nil {
		return client.ContainerListResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.list == nil {
		return client.ContainerListResult{}, errors.New("fake: not scripted")
	}
	return client.ContainerListResult{Items: slices.Clone(f.list)}, nil
}

func (f *fakeEngine) ImageInspect(context.Context, string, ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	return client.ImageInspectResult{}, errors.New("fake: not scripted")
}

func (f *fakeEngine) ImageBuild(context.Context, io.Reader, client.ImageBuildOptions) (client.ImageBuildResult, error) {
	return client.ImageBuildResult{}, errors.New("fake: not scripted")
}

func (f *fakeEngine) ImageRemove(context.Context, string, client.ImageRemoveOptions) (client.ImageRemoveResult, error) {
	return client.ImageRemoveResult{}, errors.New("fake: not scripted")
}

func (f *fakeEngine) ImageList(context.Context, client.ImageListOptions) (client.ImageListResult, error) {
	return client.ImageListResult{}, errors.New("fake: not scripted")
}

func (f *fakeEngine) Ping(context.Context, client.PingOptions) (client.PingResult, error) {
	return client.PingResult{APIVersion: "1.41"}, nil
}

// frameWriter writes the engine's multiplexed attach framing: an 8-byte
// header (stream, 3 zero bytes, big-endian size) before each chunk.
type frameWriter struct {
	w      io.Writer
	stream stdcopy.StdType
}

func (fw frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		chunk := p[:min(len(p), 32<<10)]
		hdr := []byte{byte(fw.stream), 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(chunk)))
		if _, err := fw.w.Write(append(hdr, chunk...)); err != nil {
			return 0, err
		}
		p = p[len(chunk):]
	}
	return n, nil
}

// unixPair returns two connected Unix stream sockets; unlike net.Pipe they
// support CloseWrite, which the driver uses to end the worker's stdin.
func unixPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "fake-attach")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	return conns[0], conns[1], nil
}

// testDirs returns a fresh run dir and workspace dir.
func testDirs(t *testing.T) (runDir, workspaceDir string) {
	t.Helper()
	base := t.TempDir()
	runDir, workspaceDir = base+"/run", base+"/ws"
	for _, d := range []string{runDir, workspaceDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return runDir, workspaceDir
}
