package kubernetes

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

// runSessionWorker runs the real session worker on what a channel's Pod
// mounts, reaching the broker as in a Pod: through the hello file and the
// network listener.
func runSessionWorker(ctx context.Context, m k8stest.SessionMounts) {
	worker.RunSession(ctx, worker.SessionOptions{Hello: filepath.Join(m.RunDir, wire.SessionHelloName),
		Socket: filepath.Join(m.RunDir, "no-socket-in-a-pod"), Workspace: m.Workspace})
}

// TestClusterSessionConversation: a channel's conversation through the
// session runtime on the Kubernetes engine, end to end, with kwok's Pods
// played by the real session worker on what each Pod mounts
// (sessionConversation).
func TestClusterSessionConversation(t *testing.T) {
	c := k8stest.Require(t)
	var played *k8stest.SessionPods
	sessionConversation(t, c, conversationEnv{
		listen:  "127.0.0.1:0",
		address: func(ln *net.TCPAddr) netip.AddrPort { return ln.AddrPort() },
		image:   "rtsandbox-worker:test",
		claim: func(ns, name, root string) {
			c.BindClaim(t, ns, name)
			played = c.PlaySessionPods(t, ns, root, runSessionWorker)
		},
		started: func() int { return played.Started() },
	})
}

// conversationEnv is where sessionConversation runs: the listener's
// address and the one workers dial, the worker image, how the claim is
// bound (and, on kwok, its Pods played), and how many workers started
// (nil when nothing counts them).
type conversationEnv struct {
	listen  string
	address func(*net.TCPAddr) netip.AddrPort
	image   string
	claim   func(ns, name, root string)
	started func() int
}

// faultNotice passes records on to Handler and signals heard at the
// session runtime's record of a container that stopped serving.
type faultNotice struct {
	slog.Handler
	heard chan<- struct{}
}

func (h faultNotice) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "session container stopped serving" {
		select {
		case h.heard <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h faultNotice) WithAttrs(attrs []slog.Attr) slog.Handler {
	return faultNotice{Handler: h.Handler.WithAttrs(attrs), heard: h.heard}
}

func (h faultNotice) WithGroup(name string) slog.Handler {
	return faultNotice{Handler: h.Handler.WithGroup(name), heard: h.heard}
}

// sessionConversation runs a channel's conversation through the session
// runtime on the engine: the channel's Pod is created with its run
// directory and workspace on the claim, its worker reaches the broker
// over the network listener with the channel's token and each turn's
// own, the turns' tokens are revoked when they end, the conversation
// survives the Pod's deletion (the next turn's Pod continues it from the
// workspace), and Remove deletes the Pod.
func sessionConversation(t *testing.T, c *k8stest.Cluster, env conversationEnv) {
	ctx := clusterCtx(t)
	model := fakemodel.New(fakemodel.Reply("first answer"), fakemodel.Reply("second answer"), fakemodel.Reply("third answer"))
	defer model.Close()

	tokens := broker.NewTokens()
	ln, err := broker.ListenNet(env.listen, tokens, broker.NetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	root, err := os.MkdirTemp("", "k8s-claim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	o := clusterOptions(t, c)
	o.Broker = env.address(ln.Addr().(*net.TCPAddr))
	o.SessionClaim, o.SessionRoot = "channels", root
	eng, err := NewSessions(c.Clientset.CoreV1(), o)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan struct{}, 1) // the runtime heard the channel's Pod go
	env.claim(o.Namespace, o.SessionClaim, root)
	uid, gid := 0, 0
	if os.Geteuid() == 0 {
		uid, gid = 1000, 1000
	}
	handOver := func(path string) error {
		if uid == 0 {
			return nil
		}
		return os.Lchown(path, uid, gid)
	}
	newBroker := func(channel rtsandbox.ChannelKey, profile, socket string) (session.Broker, error) {
		s, err := conversationBroker(model, channel)
		if err != nil {
			return nil, err
		}
		if err := s.Listen(socket); err != nil {
			return nil, err
		}
		return NewSessionBroker(s, tokens, wire.BrokerHello{Broker: o.Broker.String()}, socket, filepath.Dir(socket), handOver)
	}
	rt, err := session.New(session.Options{Driver: eng, NewBroker: newBroker,
		Profiles: map[string]session.Profile{"studio": {}}, ProfileFor: func(rtsandbox.ChannelKey) string { return "studio" },
		PartyDir: filepath.Join(root, "party"), Image: env.image, Installation: o.Installation,
		UID: uid, GID: gid, TurnTimeout: 30 * time.Second, StartTimeout: 30 * time.Second,
		Logger: slog.New(faultNotice{Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}), heard: heard})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })

	bind := rtsandbox.Binding{Channel: "fake:guests", Speaker: rtsandbox.Speaker{ID: "ann", Name: "Ann"}}
	turn := func(text, want string) {
		t.Helper()
		began := time.Now()
		reply, err := rt.RunTurn(ctx, bind, text)
		if err != nil || reply.Text != want {
			dumpSessionPods(t, c, eng, o.Namespace)
			t.Fatalf("turn %q: %+v, %v; want %q", text, reply, err, want)
		}
		t.Logf("turn %q in %v", text, time.Since(began))
	}
	turn("hello", "first answer")
	pods := c.Clientset.CoreV1().Pods(o.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + container.RoleSession})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("session Pods: %v, %v; want one", list, err)
	}
	first := list.Items[0]
	if got := tokens.Live(); got != 1 {
		t.Errorf("%d live tokens after the turn, want the channel's alone", got)
	}
	turn("and then?", "second answer")
	if env.started != nil {
		if got := env.started(); got != 1 {
			t.Errorf("%d workers started for two turns, want one: the warm worker serves the second", got)
		}
	}

	// The Pod goes (evicted, deleted by hand): the next turn's Pod
	// continues the conversation from the workspace on the claim.
	if err := pods.Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, c, o.Namespace, first.Name, first.UID)
	// The runtime hears the deletion through the engine's watch; the turn
	// comes after, as a guest's would (one in the instant between is cut:
	// docs/kubernetes.md, "Left").
	select {
	case <-heard:
	case <-ctx.Done():
		t.Fatalf("the session runtime never heard its Pod's deletion: %v", ctx.Err())
	}
	turn("still there?", "third answer")
	reqs := model.Requests()
	if last := string(reqs[len(reqs)-1].Raw); !strings.Contains(last, "first answer") || !strings.Contains(last, "second answer") {
		t.Errorf("the turn after the Pod's deletion lost the conversation: %s", last)
	}
	again, err := pods.Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil || again.UID == first.UID {
		t.Errorf("after the deletion: %v, %v; want a new Pod under the same name", again, err)
	}
	if env.started != nil {
		if got := env.started(); got != 2 {
			t.Errorf("%d workers started, want 2", got)
		}
	}

	if err := rt.Remove(ctx, bind.Channel); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, first.Name, metav1.GetOptions{}); err == nil {
		t.Error("the channel's Pod outlived Remove")
	}
	if got := tokens.Live(); got != 0 {
		t.Errorf("%d live tokens after Remove, want none", got)
	}
}

// dumpSessionPods logs the session Pods of ns, their state and their
// workers' last lines, for a failed turn.
func dumpSessionPods(t *testing.T, c *k8stest.Cluster, eng *Sessions, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + container.RoleSession})
	if err != nil {
		t.Logf("list session Pods: %v", err)
		return
	}
	if evs, err := c.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	for _, p := range list.Items {
		t.Logf("Pod %s: phase %s, conditions %+v, containers %+v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		logs, err := eng.Logs(ctx, p.Name, 50)
		t.Logf("its worker's log (%v):\n%s", err, logs)
	}
}

// conversationBroker is the channel's session broker of a profile on the
// stand-in model, before it listens.
func conversationBroker(model *fakemodel.Server, channel rtsandbox.ChannelKey) (*broker.Session, error) {
	b, err := broker.New(broker.Config{API: rtsandbox.ModelAPIOpenAI, ModelURL: upstream.MustParseEndpoint(model.ChatURL(), true),
		Model: "test-model", Logger: slog.New(slog.DiscardHandler),
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
			return rtsandbox.Secret("sk-test-key"), nil
		}})
	if err != nil {
		return nil, err
	}
	return broker.NewSession(broker.SessionConfig{Broker: b, Channel: channel, Worker: wire.SessionWorkerConfig{
		ModelAPI: rtsandbox.ModelAPIOpenAI, Model: "test-model", Prompt: "Be brief.", TimeZone: "UTC",
		Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}})
}

// waitGone waits, by a watch, until the Pod uid is gone.
func waitGone(t *testing.T, ctx context.Context, c *k8stest.Cluster, ns, name string, uid types.UID) {
	t.Helper()
	for {
		p, err := c.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID != uid {
			return
		}
		w, err := c.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the Pod was not deleted")
		}
	}
}
