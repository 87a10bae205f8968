package docker

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// watchHeard bounds how long a fault may take to be heard: generous for a
// loaded CI machine, and far below any turn timeout (the fault is heard
// by watching, not found at the deadline).
const watchHeard = 10 * time.Second

// TestIntegrationSessionWatch (issue 22 item 1): a watch hears its
// container removed, paused, or crashed (PID 1 killed from the host, as an
// OOM kill would: Docker's restart policy restarts it) at once; a paused
// container's Status is stopped, not running; a container Docker
// restarted healthy after a crash is running again and a new watch
// follows it. A kill through the engine is the conformance suite's
// (TestIntegrationEngineConformance).
func TestIntegrationSessionWatch(t *testing.T) {
	needDocker(t)
	tests := []struct {
		name  string
		fault func(ctx context.Context, t *testing.T, name string)
		after string // Status once the fault was heard ("" for no check)
	}{
		{"removed", func(ctx context.Context, t *testing.T, name string) {
			if _, err := integ.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}, rtcontainer.StateMissing},
		{"paused", func(ctx context.Context, t *testing.T, name string) {
			if _, err := integ.cli.ContainerPause(ctx, name, client.ContainerPauseOptions{}); err != nil {
				t.Fatal(err)
			}
		}, rtcontainer.StateStopped},
		{"crashed", func(ctx context.Context, t *testing.T, name string) {
			if os.Geteuid() != 0 {
				t.Skip("killing the container's PID 1 from the host needs root")
			}
			res, err := integ.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(res.Container.State.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := newSessionDriver(integ.cli)
			spec := sessionSpec(t)
			ensureFromMissing(ctx, t, d, spec)
			faults, err := d.Watch(ctx, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			tt.fault(ctx, t, spec.Name)
			select {
			case err := <-faults:
				if !errors.Is(err, rtcontainer.ErrSessionDown) {
					t.Errorf("fault = %v; want ErrSessionDown", err)
				}
				t.Logf("%s heard after %v: %v", tt.name, time.Since(began), err)
			case <-time.After(watchHeard):
				t.Fatalf("%s not heard within %v", tt.name, watchHeard)
			}
			if tt.after != "" {
				if st, err := d.Status(ctx, spec.Name); err != nil || st.State != tt.after {
					t.Errorf("Status = %+v, %v; want %s", st, err, tt.after)
				}
			}
			if _, err := d.Watch(ctx, spec.Name); tt.after != "" && !errors.Is(err, rtcontainer.ErrSessionDown) {
				t.Errorf("Watch of a %s container = %v; want ErrSessionDown", tt.name, err)
			}
		})
	}
}

// TestIntegrationSessionWatchAfterRestart: `docker restart` is heard (its
// die) by the watch of the container as it ran; a watch of the restarted
// container does not take the restart's own trailing event for a fault
// of its own: the first fault it reports is the pause that follows.
func TestIntegrationSessionWatchAfterRestart(t *testing.T) {
	needDocker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newSessionDriver(integ.cli)
	spec := sessionSpec(t)
	ensureFromMissing(ctx, t, d, spec)
	first, err := d.Watch(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := integ.cli.ContainerRestart(ctx, spec.Name, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-first:
		if !errors.Is(err, rtcontainer.ErrSessionDown) {
			t.Fatalf("fault = %v", err)
		}
	case <-time.After(watchHeard):
		t.Fatal("the restart was not heard")
	}
	second, err := d.Watch(ctx, spec.Name)
	if err != nil {
		t.Fatalf("Watch of the restarted container = %v", err)
	}
	if _, err := integ.cli.ContainerPause(ctx, spec.Name, client.ContainerPauseOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if !strings.HasSuffix(err.Error(), ": pause") {
			t.Errorf("the restarted container's first fault = %v; want its pause", err)
		}
	case <-time.After(watchHeard):
		t.Fatal("the pause was not heard")
	}
}
