package sealed

// Real-Docker tests of the warm pool (issue 25, "How we will know it
// works"): freshness, the burst bound and faults.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// poolDocker is a runtime on the Docker driver with a warm pool of size
// workers of image, filled before it returns; turns' stats are recorded.
// After the test nothing of it is left: no container, no run dir.
type poolDocker struct {
	f        *fixture
	mu       sync.Mutex
	stats    []TurnStats
	refilled atomic.Int32
}

func newPoolDocker(t *testing.T, image string, size int, edit func(f *fixture)) *poolDocker {
	t.Helper()
	p := &poolDocker{}
	p.f = newFixture(t, func(f *fixture) {
		f.opts.Driver, f.opts.Image, f.opts.Installation = integ.driver, image, integ.installation
		f.opts.PoolSize = size
		f.opts.OnTurn = func(s TurnStats) { p.mu.Lock(); p.stats = append(p.stats, s); p.mu.Unlock() }
		f.opts.OnPoolRefill = func(time.Duration) { p.refilled.Add(1) }
		if edit != nil {
			edit(f)
		}
	})
	t.Cleanup(func() {
		p.f.rt.Close(context.Background())
		waitRemoved(t, integ.driver)
		assertNoContainers(t)
		assertEmpty(t, p.f.runRoot)
	})
	p.f.rt.StartPool()
	waitIdle(t, p.f.rt, size)
	return p
}

func (p *poolDocker) turn(t *testing.T, channel, text string) (rtsandbox.Reply, TurnStats) {
	t.Helper()
	reply, err := p.f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: rtsandbox.ChannelKey(channel), Speaker: speaker("guest")}, text)
	if err != nil {
		t.Fatalf("RunTurn(%s) = %v", channel, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return reply, p.stats[len(p.stats)-1]
}

// scribble parses the scribbler's reply.
func scribble(t *testing.T, text string) (host string, found, wrote []string) {
	t.Helper()
	for _, field := range strings.Fields(text) {
		k, v, _ := strings.Cut(field, "=")
		var list []string
		if v != "" {
			list = strings.Split(v, ",")
		}
		switch k {
		case "host":
			host = v
		case "found":
			found = list
		case "wrote":
			wrote = list
		}
	}
	if host == "" {
		t.Fatalf("scribbler reply %q names no host", text)
	}
	return host, found, wrote
}

// TestIntegrationPoolFreshness: a hostile turn writes into every writable
// place of its container; the next turns, warm, see none of it, and no
// container serves two turns: every turn ran in another container (the
// engine's container ID, the worker's hostname) under another name.
func TestIntegrationPoolFreshness(t *testing.T) {
	needDocker(t)
	p := newPoolDocker(t, integ.scribblerImage, 1, nil)
	var hosts, names []string
	var firstWrote []string
	for i := range 3 {
		reply, st := p.turn(t, "fake:fresh", "scribble")
		host, found, wrote := scribble(t, reply.Text)
		if !st.Warm {
			t.Errorf("turn %d started cold; want warm", i+1)
		}
		if len(found) != 0 {
			t.Errorf("turn %d found an earlier turn's marks: %v", i+1, found)
		}
		for _, must := range []string{"/tmp", "/workspace"} {
			if !slices.Contains(wrote, must) {
				t.Errorf("turn %d could not write %s (wrote %v): the test proves nothing there", i+1, must, wrote)
			}
		}
		if i == 0 {
			firstWrote = wrote
		} else if !slices.Equal(wrote, firstWrote) {
			t.Errorf("turn %d wrote %v; turn 1 wrote %v: the places differ", i+1, wrote, firstWrote)
		}
		hosts, names = append(hosts, host), append(names, st.Container)
		waitIdle(t, p.f.rt, 1)
	}
	t.Logf("writable places: %v; containers %v", firstWrote, hosts)
	for _, ids := range [][]string{hosts, names} {
		if s := slices.Compact(slices.Sorted(slices.Values(ids))); len(s) != len(ids) {
			t.Errorf("a container served two turns: %v", ids)
		}
	}
}

// TestIntegrationPoolBurst: 4 × the pool size of channels at once, with
// fewer turn slots than channels: every message is answered, the
// installation never has more containers than pool + max_turns (the
// engine's list, sampled while the burst runs), and none is left.
func TestIntegrationPoolBurst(t *testing.T) {
	needDocker(t)
	const size, maxTurns = 2, 3
	model := newModelServer(t, slices.Repeat([]string{completion("hi")}, 4*size)...)
	p := newPoolDocker(t, integ.workerImage, size, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.opts.MaxTurns = maxTurns
	})
	ctx, stop := context.WithCancel(context.Background())
	peak := make(chan int, 1)
	go func() { // samples the engine's list until the burst is over
		most := 0
		for ctx.Err() == nil {
			list, err := integ.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
				Filters: client.Filters{}.Add("label", container.InstallationLabel+"="+integ.installation)})
			if err == nil {
				most = max(most, len(list.Items))
			}
		}
		peak <- most
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4*size)
	for i := range 4 * size {
		wg.Go(func() {
			reply, err := p.f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: rtsandbox.ChannelKey(fmt.Sprintf("fake:burst-%d", i)), Speaker: speaker("guest")}, "hello")
			if err == nil && !reply.OK {
				err = fmt.Errorf("reply %+v", reply)
			}
			errs <- err
		})
	}
	wg.Wait()
	stop()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("RunTurn = %v", err)
		}
	}
	most := <-peak
	warm := 0
	for _, s := range p.stats {
		if s.Warm {
			warm++
		}
	}
	t.Logf("%d turns, %d warm; at most %d containers at once", len(p.stats), warm, most)
	if most > size+maxTurns {
		t.Errorf("%d containers at once; want at most pool %d + max_turns %d", most, size, maxTurns)
	}
	if warm == 0 || warm == len(p.stats) {
		t.Errorf("%d of %d turns warm; want a burst served warm and, past the pool, cold", warm, len(p.stats))
	}
}

// killAtClaim kills a warm worker's container the moment a turn claims
// it, before the claim reaches the engine: the pool saw it alive.
type killAtClaim struct {
	container.Prestarter
	left atomic.Int32 // claims still to kill at
}

func (k *killAtClaim) Prestart(ctx context.Context, spec container.Spec) (container.Warm, error) {
	w, err := k.Prestarter.Prestart(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &killedWarm{Warm: w, k: k}, nil
}

type killedWarm struct {
	container.Warm
	k *killAtClaim
}

func (w *killedWarm) Run(ctx context.Context, input []byte) (container.Result, error) {
	if w.k.left.Add(-1) >= 0 {
		if _, err := integ.cli.ContainerKill(ctx, w.Name(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			return container.Result{}, err
		}
	}
	return w.Warm.Run(ctx, input)
}

// TestIntegrationPoolFaults: a warm worker killed while it waits is
// replaced without a claim; one killed at its claim fails before it took
// the turn, and the turn answers on another container; the pool refills.
func TestIntegrationPoolFaults(t *testing.T) {
	needDocker(t)
	model := newModelServer(t, completion("hi"))
	killer := &killAtClaim{Prestarter: integ.driver}
	p := newPoolDocker(t, integ.workerImage, 2, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.opts.Driver = killer
	})
	list := func() []string {
		l, err := integ.cli.ContainerList(context.Background(), client.ContainerListOptions{
			Filters: client.Filters{}.Add("label", container.InstallationLabel+"="+integ.installation)})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range l.Items {
			names = append(names, strings.TrimPrefix(c.Names[0], "/"))
		}
		return names
	}
	idle := list()
	if len(idle) != 2 {
		t.Fatalf("running containers %v; want the 2 warm workers", idle)
	}
	// Killed while idle: noticed and replaced, no turn needed.
	if _, err := integ.cli.ContainerKill(context.Background(), idle[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed worker replaced", func() bool {
		names := list()
		return p.refilled.Load() == 3 && p.f.rt.PoolStats().Idle == 2 && len(names) == 2 && !slices.Contains(names, idle[0])
	})
	// Killed at its claim: the turn still answers.
	killer.left.Store(1)
	reply, st := p.turn(t, "fake:faults", "hello")
	if !reply.OK {
		t.Errorf("reply %+v; want ok", reply)
	}
	t.Logf("the turn ran on %s (warm %v)", st.Container, st.Warm)
	waitIdle(t, p.f.rt, 2)
}

// TestIntegrationPoolImageRebuildDrains: the pool's image tag is moved to
// another image while its workers wait (what `image build` does while
// serve runs): the next turn runs on the new image, cold, no worker of
// the old image serves a turn, and the pool refills from the new one.
func TestIntegrationPoolImageRebuildDrains(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	tag := "rtsandbox-test-sbpool:" + randomHex(6)
	retag := func(src string) {
		if _, err := integ.cli.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: tag}); err != nil {
			t.Fatal(err)
		}
	}
	retag(integ.workerImage)
	t.Cleanup(func() { integ.cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{}) })
	model := newModelServer(t, completion("old image"))
	p := newPoolDocker(t, tag, 1, func(f *fixture) { f.cfg.ModelURL = model.url() })
	retag(integ.scribblerImage) // the rebuild
	reply, st := p.turn(t, "fake:rebuild", "hello")
	if !strings.HasPrefix(reply.Text, "host=") || st.Warm {
		t.Errorf("after the rebuild: reply %q, warm %v; want the new image's worker, cold", reply.Text, st.Warm)
	}
	waitIdle(t, p.f.rt, 1)
	reply, st = p.turn(t, "fake:rebuild", "hello")
	if !strings.HasPrefix(reply.Text, "host=") || !st.Warm {
		t.Errorf("after the refill: reply %q, warm %v; want the new image's worker, warm", reply.Text, st.Warm)
	}
	if n := len(model.gotBodies()); n != 0 {
		t.Errorf("the old image's worker called the model %d times", n)
	}
}
