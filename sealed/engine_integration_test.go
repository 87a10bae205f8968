package sealed

// Integration tests of a slow, cut or wedged engine: the driver talks to the
// daemon through a socket proxy the test controls.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mobycontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// proxyMode is what the engine proxy does with connections.
type proxyMode int

const (
	proxyPass      proxyMode = iota // forward bytes both ways
	proxyBlackHole                  // accept and never answer (a wedged daemon)
	proxyRefuse                     // close at once (a daemon gone)
)

// engineProxy stands between a client and the daemon's socket. Switching
// away from pass cuts every open connection: in black-hole mode the
// client's side stays open and silent (calls in flight hang, as on a
// wedged daemon), in refuse mode it is closed. Switching back to pass
// closes the silent ones, as a daemon restart would.
type engineProxy struct {
	path             string // the proxy's socket
	network, address string // the daemon's
	ln               net.Listener

	mu     sync.Mutex
	mode   proxyMode
	pairs  map[*proxyPair]bool
	silent []net.Conn // client sides held open and unanswered
	wg     sync.WaitGroup
}

type proxyPair struct {
	client, daemon net.Conn
	mu             sync.Mutex
	cut            bool // the daemon side was cut; the client side is the proxy's
}

// startEngineProxy listens on a fresh socket in pass mode; the test's end
// closes it and every connection.
func startEngineProxy(t *testing.T) *engineProxy {
	t.Helper()
	network, address, err := dockertest.Daemon()
	if err != nil {
		t.Fatal(err)
	}
	p := &engineProxy{path: filepath.Join(shortTempDir(t), "engine.sock"), network: network, address: address, pairs: map[*proxyPair]bool{}}
	if p.ln, err = net.Listen("unix", p.path); err != nil {
		t.Fatal(err)
	}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// client returns a Docker client through the proxy, closed at the test's
// end.
func (p *engineProxy) client(t *testing.T) *client.Client { return dockertest.ClientVia(t, p.path) }

func (p *engineProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch p.mode {
		case proxyRefuse:
			c.Close()
		case proxyBlackHole:
			p.silent = append(p.silent, c)
		default:
			p.forward(c)
		}
		p.mu.Unlock()
	}
}

// forward connects c to the daemon and copies both ways, passing half
// closes on (the attach stream ends the worker's stdin with one). The
// caller holds p.mu.
func (p *engineProxy) forward(c net.Conn) {
	d, err := net.Dial(p.network, p.address)
	if err != nil {
		c.Close()
		return
	}
	pair := &proxyPair{client: c, daemon: d}
	p.pairs[pair] = true
	var copies sync.WaitGroup
	copies.Go(func() { pair.copyHalf(d, c) })
	copies.Go(func() { pair.copyHalf(c, d) })
	p.wg.Go(func() {
		copies.Wait()
		d.Close()
		pair.mu.Lock()
		if !pair.cut {
			c.Close()
		}
		pair.mu.Unlock()
		p.mu.Lock()
		delete(p.pairs, pair)
		p.mu.Unlock()
	})
}

// copyHalf copies src to dst and then closes dst's write side, unless
// the pair was cut: a cut client side stays silent.
func (pair *proxyPair) copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	pair.mu.Lock()
	defer pair.mu.Unlock()
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && !pair.cut {
		_ = cw.CloseWrite()
	}
}

// set switches the mode (see engineProxy).
func (p *engineProxy) set(mode proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	if mode == proxyPass {
		for _, c := range p.silent {
			c.Close()
		}
		p.silent = nil
		return
	}
	for pair := range p.pairs {
		pair.mu.Lock()
		pair.cut = true
		pair.mu.Unlock()
		pair.daemon.Close()
		if mode == proxyRefuse {
			pair.client.Close()
		} else {
			p.silent = append(p.silent, pair.client)
		}
	}
}

func (p *engineProxy) close() {
	p.ln.Close()
	p.set(proxyRefuse)
	p.set(proxyPass) // closes the silent ones
	p.wg.Wait()
}

// proxiedDriver is a Driver through p with a background reaper every
// interval, closed (and required clean) at the test's end.
func proxiedDriver(t *testing.T, p *engineProxy, interval time.Duration) *docker.Driver {
	t.Helper()
	d := docker.New(p.client(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ReapEvery(ctx, integ.installation, interval, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ReapEvery = %v", err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := d.Close(cctx); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return d
}

// labelled lists this test run's containers straight from the daemon.
func labelled(t *testing.T) []string {
	t.Helper()
	list, err := integ.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", container.InstallationLabel+"="+integ.installation),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}

// waitRunning waits until rec has started a container and the daemon
// reports it running; it returns the container's name.
func waitRunning(t *testing.T, rec *recordingDriver) string {
	t.Helper()
	name := awaitRunning(rec, 30*time.Second)
	if name == "" {
		t.Fatal("the turn container did not start")
	}
	return name
}

// awaitRunning is waitRunning for any goroutine: "" when it gave up.
func awaitRunning(rec *recordingDriver, limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		rec.mu.Lock()
		n := len(rec.specs)
		rec.mu.Unlock()
		if n > 0 {
			name := rec.lastSpec().Name
			got, err := integ.cli.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{})
			if err == nil && got.Container.State != nil && got.Container.State.Running {
				return name
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// converged waits until no container of this test run is left and d has
// nothing queued, and returns how long that took.
func converged(t *testing.T, d *docker.Driver, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for len(labelled(t)) > 0 || d.Pending() > 0 {
		if time.Since(start) > limit {
			t.Fatalf("after %v: containers %v, %d removals pending; want none", limit, labelled(t), d.Pending())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

const reapInterval = 500 * time.Millisecond

// TestIntegrationEngineCutMidTurnConverges: the engine goes away while a
// turn's worker runs (refused, or wedged). The turn ends, its container
// is queued; when the engine is back, the same driver removes it within
// about a reaper interval, and a labelled container nobody owns goes too.
// The reaper leaves the running turn's container alone.
func TestIntegrationEngineCutMidTurnConverges(t *testing.T) {
	needDocker(t)
	p := startEngineProxy(t)
	d := proxiedDriver(t, p, reapInterval)

	t.Run("orphan", func(t *testing.T) {
		labels, _ := container.TurnLabels(integ.installation)
		if _, err := integ.cli.ContainerCreate(context.Background(), client.ContainerCreateOptions{
			Name:   container.Name("orphan:" + randomHex(4)),
			Config: &mobycontainer.Config{Image: integ.hostileImage, Labels: labels},
			HostConfig: &mobycontainer.HostConfig{
				NetworkMode: "none", LogConfig: mobycontainer.LogConfig{Type: "none"},
			},
		}); err != nil {
			t.Fatal(err)
		}
		took := converged(t, d, reapInterval+10*time.Second)
		t.Logf("orphan removed %v after it appeared (reap interval %v)", took, reapInterval)
	})

	for _, tc := range []struct {
		name    string
		mode    proxyMode
		timeout time.Duration
		class   string
	}{
		{"refused", proxyRefuse, 30 * time.Second, rtsandbox.ClassEngine},
		{"black-hole", proxyBlackHole, 8 * time.Second, rtsandbox.ClassTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &operatorLog{}
			var stats TurnStats
			f, _ := dockerFixture(t, integ.hostileImage, func(f *fixture) {
				f.opts.Driver = &recordingDriver{OneShot: d}
				f.opts.TurnTimeout = tc.timeout
				f.opts.Logger = slog.New(log)
				f.opts.OnTurn = func(s TurnStats) { stats = s }
			})
			rec := f.opts.Driver.(*recordingDriver)
			type result struct {
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "Hello")
				done <- result{err, time.Now()}
			}()
			name := waitRunning(t, rec)
			time.Sleep(3 * reapInterval) // the reaper passes over a live turn
			if got, err := integ.cli.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{}); err != nil || !got.Container.State.Running {
				t.Fatalf("live turn container after reaper passes: %v; want it running", err)
			}
			p.set(tc.mode)
			cut := time.Now()
			r := <-done
			t.Logf("engine %s %v into the turn; RunTurn returned %v later (deadline %v after start): %v",
				tc.name, cut.Sub(start).Round(time.Millisecond), r.at.Sub(cut).Round(time.Millisecond), tc.timeout, r.err)
			if r.err == nil || stats.Class != tc.class || !stats.CleanupPending {
				t.Errorf("RunTurn = %v, class %q, pending %v; want a %s failure with its removal pending", r.err, stats.Class, stats.CleanupPending, tc.class)
			}
			if limit := start.Add(tc.timeout + time.Second); r.at.After(limit) {
				t.Errorf("RunTurn returned %v after its deadline", r.at.Sub(start.Add(tc.timeout)))
			}
			if strings.Contains(log.text(), "inspect") {
				t.Errorf("operator log asks to inspect a cleanup:\n%s", log.text())
			}
			if d.Pending() != 1 || len(labelled(t)) != 1 {
				t.Fatalf("pending %d, containers %v; want the turn's container queued and still there", d.Pending(), labelled(t))
			}
			time.Sleep(2 * reapInterval) // the engine stays away a while
			p.set(proxyPass)
			took := converged(t, d, reapInterval+10*time.Second)
			t.Logf("engine back: converged after %v (reap interval %v)", took, reapInterval)
		})
	}
}

// TestIntegrationHungEngineKeepsDeadline: with every engine call black-holed
// (from the start, or once the worker runs), a turn with a 2 s deadline
// returns within its deadline plus a second; the container is removed
// once the engine answers again.
func TestIntegrationHungEngineKeepsDeadline(t *testing.T) {
	needDocker(t)
	p := startEngineProxy(t)
	d := proxiedDriver(t, p, reapInterval)
	if _, err := d.Ping(context.Background()); err != nil { // negotiate the API version first
		t.Fatal(err)
	}
	const deadline = 2 * time.Second
	for _, when := range []string{"from-start", "mid-turn"} {
		t.Run(when, func(t *testing.T) {
			var stats TurnStats
			f, _ := dockerFixture(t, integ.hostileImage, func(f *fixture) {
				f.opts.Driver = &recordingDriver{OneShot: d}
				f.opts.TurnTimeout = deadline
				f.opts.OnTurn = func(s TurnStats) { stats = s }
			})
			rec := f.opts.Driver.(*recordingDriver)
			start := time.Now()
			cut := make(chan time.Duration, 1)
			if when == "from-start" {
				p.set(proxyBlackHole)
				cut <- 0
			} else {
				go func() {
					awaitRunning(rec, 10*time.Second)
					p.set(proxyBlackHole)
					cut <- time.Since(start)
				}()
			}
			_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "Hello")
			elapsed := time.Since(start)
			t.Logf("engine black-holed %v into the turn; RunTurn returned after %v (deadline %v): %v",
				(<-cut).Round(time.Millisecond), elapsed.Round(time.Millisecond), deadline, err)
			if !errors.Is(err, rtsandbox.ErrTurnTimeout) || stats.Class != rtsandbox.ClassTimeout {
				t.Errorf("RunTurn = %v, class %q; want the deadline", err, stats.Class)
			}
			if elapsed > deadline+time.Second {
				t.Errorf("RunTurn took %v; want at most %v", elapsed, deadline+time.Second)
			}
			p.set(proxyPass)
			took := converged(t, d, reapInterval+10*time.Second)
			t.Logf("engine back: converged after %v", took)
		})
	}
}
