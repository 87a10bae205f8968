package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// TestServeRunsc is serve with sandbox.runtime runsc: its start checks
// pass (the runtime check among them), a sealed channel's turn and a
// session channel's turn both answer through their brokers from workers
// under gVisor, and the session channel's container runs under runsc.
// Under CI=true it fails when runsc is not registered as the seal needs.
func TestServeRunsc(t *testing.T) {
	cli := dockertest.Require(t)
	dockertest.RequireRuntime(t, container.RuntimeRunsc, func(ctx context.Context) error {
		return docker.CheckRuntime(ctx, cli, container.RuntimeRunsc)
	})
	model := echoModel()
	t.Cleanup(model.Close)
	tag, cli := sessionDocker(t)
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	withRuntime(t, cfg, container.RuntimeRunsc)
	appendConfig(t, cfg, "profiles:\n  chat: {mode: session}\nchannels_profile: {\"http:studio\": chat}\nsession:\n  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg)
	if code, body := s.call(t, "POST", "/api/v1/channels/http:studio/sandbox", serveOwnerToken, `{"enabled":true}`); code != 200 {
		t.Fatalf("owner on = %d %s", code, body)
	}

	if got := chunksOf(s.say(t, "http:lobby", "sealed words")); len(got) != 1 || !strings.HasPrefix(got[0], "Answer to ") || !strings.Contains(got[0], "sealed words") {
		t.Fatalf("sealed reply = %q\nserve:\n%s", got, s.out.String())
	}
	s.sayOne(t, "http:studio", "session words", "Answer to session words")
	// Inspected by the engine only: the host sees gVisor's sandbox
	// process, not the worker's.
	c, err := cli.ContainerInspect(context.Background(), oneContainer(t, cli, tag, s).ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Container.HostConfig.Runtime; got != container.RuntimeRunsc {
		t.Errorf("session container runtime %q; want runsc", got)
	}
	s.stopOK(t)
}

// withRuntime sets sandbox.runtime in the config file at path.
func withRuntime(t testing.TB, path, runtime string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(b), "\nsandbox:\n", "\nsandbox:\n  runtime: "+runtime+"\n", 1)
	if out == string(b) {
		t.Fatalf("%s has no sandbox block", path)
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}
