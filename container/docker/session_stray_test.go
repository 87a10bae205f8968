package docker

import (
	"context"
	"errors"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// ReapStrays removes this installation's session containers left under an
// earlier session.container_prefix, and nothing else: not a channel's
// current container, not another installation's, not a turn container.
func TestReapStraysAfterPrefixChange(t *testing.T) {
	ctx := context.Background()
	f := newFakeSessionEngine()
	d := newSessionDriver(f)
	named := func(prefix, inst, channel string) rtcontainer.SessionSpec {
		s := sessionTestSpec()
		s.Installation, s.Channel = inst, channel
		s.Name = rtcontainer.PrefixedSessionName(prefix, inst, channel)
		return s
	}
	current := named("rt0-x", "test", "discord:party")
	stray := named(rtcontainer.DefaultSessionPrefix, "test", "discord:party")
	strayOther := named("old", "test", "discord:other")
	foreign := named(rtcontainer.DefaultSessionPrefix, "prod", "discord:party")
	for _, s := range []rtcontainer.SessionSpec{current, stray, strayOther, foreign} {
		if err := d.EnsureRunning(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.created["turn"] = client.ContainerCreateOptions{Config: &container.Config{Labels: map[string]string{
		rtcontainer.InstallationLabel: "test", rtcontainer.RoleLabel: rtcontainer.RoleTurn}}}
	n, err := d.ReapStrays(ctx, "test", func(ch string) string { return rtcontainer.PrefixedSessionName("rt0-x", "test", ch) })
	if err != nil || n != 2 {
		t.Errorf("ReapStrays = %d, %v; want 2", n, err)
	}
	var left []string
	for name := range f.created {
		left = append(left, name)
	}
	sort.Strings(left)
	want := []string{current.Name, foreign.Name, "turn"}
	sort.Strings(want)
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("containers left (-want +got):\n%s", diff)
	}
	if _, err := d.ReapStrays(ctx, "-bad", func(string) string { return "" }); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Errorf("ReapStrays(-bad) = %v", err)
	}
}
