package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

// TestKubernetesSessionServe (cluster tier): serve on engine: kubernetes
// with a session profile, from its config to a guest's reply. The
// channel's Pod is created on the claim; its worker (played on kwok's
// Pod by the real session worker on what the Pod mounts) reaches serve's
// broker listener with the channel's token from the hello file and each
// turn's own; the second turn continues the first's conversation in the
// same Pod; the Pod outlives serve's stop, and `rtsandbox reap` removes
// it.
func TestKubernetesSessionServe(t *testing.T) {
	parallelServe(t)
	c := k8stest.Require(t)
	ns := c.Namespace(t)
	c.BindClaim(t, ns, "channels")
	model := echoModel()
	defer model.Close()
	addr, brokerAddr := freeAddr(t), freeAddr(t)
	path, state := serveConfig(t, model.ChatURL(), "rtsandbox-worker:k8s-test", addr)
	root := filepath.Join(state, "channels")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	appendConfig(t, path, fmt.Sprintf("profiles:\n  chat: {mode: session}\ndefault_profile: chat\nsession:\n  party_dir: %s/party\n"+
		"engine: kubernetes\nkubernetes:\n  kubeconfig: %s\n  namespace: %s\n  broker: {listen: %q, address: %q}\n  session: {claim: channels, root: %s}\n",
		root, c.Kubeconfig, ns, brokerAddr, brokerAddr, root))
	pods := c.PlaySessionPods(t, ns, root, func(ctx context.Context, m k8stest.SessionMounts) {
		worker.RunSession(ctx, worker.SessionOptions{Hello: filepath.Join(m.RunDir, wire.SessionHelloName),
			Socket: filepath.Join(m.RunDir, "no-socket-in-a-pod"), Workspace: m.Workspace})
	})

	s := startServe(t, addr, "--config", path)
	s.sayOne(t, "http:lobby", "hello", "Answer to hello")
	s.sayOne(t, "http:lobby", "and again", "Answer to and again")
	wantInLast(t, model, "the second turn's model request", "hello", "Answer to hello")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sessionPods := func() int { return livePods(t, ctx, c, ns, container.RoleSession) }
	if n, started := sessionPods(), pods.Started(); n != 1 || started != 1 {
		t.Errorf("%d session Pods, %d workers started for two turns; want one of each", n, started)
	}
	s.stopOK(t)
	if n := sessionPods(); n != 1 {
		t.Errorf("%d session Pods after serve stopped; want the channel's, kept for the next start", n)
	}
	reapOK(t, ctx, path, "removed 1 session container(s)")
	if n := sessionPods(); n != 0 {
		t.Errorf("%d session Pods after reap", n)
	}
}

// reapOK runs `rtsandbox reap` on the config at path and wants it to
// succeed and say want.
func reapOK(t *testing.T, ctx context.Context, path, want string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"reap", "--config", path}, serveEnv, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("reap = %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), want) {
		t.Errorf("reap said:\n%s\nwant %q", out.String(), want)
	}
}

// livePods counts the Pods of role in namespace ns that are not being
// deleted.
func livePods(t *testing.T, ctx context.Context, c *k8stest.Cluster, ns, role string) int {
	t.Helper()
	list, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + role})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}
