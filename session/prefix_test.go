package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// Options.ContainerPrefix (config session.container_prefix): a channel's
// container is created, inspected and removed under the configured
// prefix, with the installation+channel hash, and two channels never
// share a name.
func TestContainerPrefixNamesContainers(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.ContainerPrefix = "rt0-x" })
	if _, err := f.turnIn(context.Background(), "discord:1", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.turnIn(context.Background(), "discord:2", "a"); err != nil {
		t.Fatal(err)
	}
	one, two := container.PrefixedSessionName("rt0-x", "test", "discord:1"), container.PrefixedSessionName("rt0-x", "test", "discord:2")
	if !strings.HasPrefix(one, "rt0-x-discord_1-") || one == two {
		t.Fatalf("names %q and %q", one, two)
	}
	f.w.mu.Lock()
	var running []string
	for name := range f.w.running {
		running = append(running, name)
	}
	f.w.mu.Unlock()
	if diff := cmp.Diff([]string{one, two}, running, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("running containers (-want +got):\n%s", diff)
	}
	f.w.takeCalls()
	if err := f.rt.Remove(context.Background(), "discord:1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{one}, removals(f.w.takeCalls())); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// A prefix that would break the container name rule is a setup error.
func TestContainerPrefixRefused(t *testing.T) {
	for _, prefix := range []string{"RT", "-rt", "rt.x", "rt_x", strings.Repeat("r", 42)} {
		o := testOptions(shortDir(t), newWorld(), &logSink{})
		o.ContainerPrefix = prefix
		if _, err := New(o); !errors.Is(err, rtsandbox.ErrInvalid) {
			t.Errorf("prefix %q: New = %v; want ErrInvalid", prefix, err)
		}
	}
}
