package kubeclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// apiServer answers every GET with an empty object of the kind its path
// asks for, and records the paths, the user agents and the connections.
type apiServer struct {
	mu     sync.Mutex
	paths  []string
	agents map[string]bool
	conns  int
}

func (s *apiServer) start(t *testing.T) *httptest.Server {
	s.agents = map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.Path)
		s.agents[r.UserAgent()] = true
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/version":
			w.Write([]byte(`{"gitVersion":"v1.36.4"}`))
		case strings.Contains(r.URL.Path, "/networkpolicies/"):
			w.Write([]byte(`{"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1","metadata":{"name":"p"}}`))
		case strings.Contains(r.URL.Path, "/runtimeclasses/"):
			w.Write([]byte(`{"kind":"RuntimeClass","apiVersion":"node.k8s.io/v1","metadata":{"name":"gvisor"},"handler":"runsc"}`))
		default:
			w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"rtsandbox"}}`))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestSetCallsEachGroupOverOneClient: each group's client reaches its
// group's path, all of them over one HTTP client (one connection for
// calls one after another) with client-go's default user agent, as a
// Clientset's would.
func TestSetCallsEachGroupOverOneClient(t *testing.T) {
	var s apiServer
	srv := s.start(t)
	set, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := set.CoreV1().Namespaces().Get(ctx, "rtsandbox", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := set.NetworkingV1().NetworkPolicies("rtsandbox").Get(ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := set.NodeV1().RuntimeClasses().Get(ctx, "gvisor", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := set.Discovery().ServerVersion()
	if err != nil || v.GitVersion != "v1.36.4" {
		t.Fatalf("ServerVersion = %v, %v", v, err)
	}
	want := []string{"/api/v1/namespaces/rtsandbox", "/apis/networking.k8s.io/v1/namespaces/rtsandbox/networkpolicies/p",
		"/apis/node.k8s.io/v1/runtimeclasses/gvisor", "/version"}
	s.mu.Lock()
	defer s.mu.Unlock()
	if diff := cmp.Diff(want, s.paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	if !s.agents[rest.DefaultKubernetesUserAgent()] || len(s.agents) != 1 {
		t.Errorf("user agents %v; want client-go's default alone", s.agents)
	}
	if s.conns != 1 {
		t.Errorf("%d connections; want the one HTTP client's one", s.conns)
	}
	if set.AuthorizationV1() == nil {
		t.Error("no authorization client")
	}
}

// TestConfigRefusesQPSWithoutBurst: a rate without a burst is a
// configuration error, as client-go's NewForConfig has it, not a client
// that never sends; a caller's own user agent is kept.
func TestConfigRefusesQPSWithoutBurst(t *testing.T) {
	if _, _, err := Config(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 5}); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("QPS without Burst: %v; want the burst error", err)
	}
	c, _, err := Config(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 5, Burst: 10, UserAgent: "rtsandbox-doctor"})
	if err != nil || c.RateLimiter == nil || c.UserAgent != "rtsandbox-doctor" {
		t.Errorf("Config = %+v, %v; want a shared rate limiter and the caller's user agent", c, err)
	}
}
