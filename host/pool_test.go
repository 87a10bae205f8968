package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
)

// kubePoolConfig is an engine: kubernetes config; pool is
// sandbox.pool.size ("" leaves it derived), sealed kubernetes.pool.sealed.
func kubePoolConfig(t *testing.T, pool string, sealed int) *config.Config {
	t.Helper()
	state, err := os.MkdirTemp("", "rtpool")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	sandbox := "sandbox:\n"
	if os.Geteuid() == 0 {
		sandbox += "  user: \"1000:1000\"\n"
	}
	if pool != "" {
		sandbox += "  pool: {size: " + pool + "}\n"
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "state_dir: %s\nmodel: {url: \"https://api.example/v1/chat/completions\", name: m, api_key_env: KEY}\n%s"+
		"engine: kubernetes\nkubernetes:\n  namespace: rtsandbox\n  broker: {listen: \":7443\", address: \"10.0.0.5:7443\"}\n  pool: {sealed: %d}\n",
		state, sandbox, sealed))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPoolForKubernetes: serve's sealed runtime keeps its warm pool on
// Kubernetes as on Docker (sandbox.pool.size, or its derived default),
// whatever the agent-sandbox pool beneath it; one-shot commands keep none.
func TestPoolForKubernetes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		pool   string
		sealed int
		want   int // -1: PoolSize's derived default
	}{
		{"derived", "", 2, -1},
		{"set", "3", 2, 3},
		{"set-without-agent-sandbox-pool", "3", 0, 3},
		{"off", "0", 2, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := kubePoolConfig(t, tt.pool, tt.sealed)
			want := tt.want
			if want < 0 {
				n, derived := PoolSize(cfg)
				if !derived || n < 1 {
					t.Fatalf("PoolSize = %d, derived %v; want a derived size of at least 1", n, derived)
				}
				want = n
			}
			if got := poolFor(cfg, true); got != want {
				t.Errorf("poolFor(serve) = %d; want %d", got, want)
			}
			if got := poolFor(cfg, false); got != 0 {
				t.Errorf("poolFor(one-shot) = %d; want 0", got)
			}
		})
	}
}

// prestarter is a container.Prestarter that never starts a worker.
type prestarter struct{ specRecorder }

func (*prestarter) Prestart(context.Context, container.Spec) (container.Warm, error) {
	return nil, errors.New("not started")
}

func (*prestarter) ImageID(_ context.Context, ref string) (string, error) { return ref, nil }

// TestSealedRuntimeKeepsItsPoolOnKubernetes: the sealed runtime serve
// builds on engine: kubernetes has its warm pool of sandbox.pool.size,
// and doctor says so, naming the agent-sandbox pool beneath it.
func TestSealedRuntimeKeepsItsPoolOnKubernetes(t *testing.T) {
	cfg := kubePoolConfig(t, "3", 2)
	rt, err := NewSealedRuntime(cfg, mapEnv(map[string]string{"KEY": "k"}), SealedOptions{Driver: &prestarter{}, Pool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if got := rt.Runtime.PoolStats().Size; got != 3 {
		t.Errorf("the runtime's pool size = %d; want 3", got)
	}
	c := poolCheck(cfg)
	if want := "3 sealed worker(s) started ahead (sandbox.pool.size); workers come from the agent-sandbox warm pool " + SealedPoolName + " of 2"; c.status != statusOK || !strings.HasPrefix(c.msg, want) {
		t.Errorf("poolCheck = %v %q; want ok %q…", c.status, c.msg, want)
	}
	if c := poolCheck(kubePoolConfig(t, "0", 0)); !strings.Contains(c.msg, "a Pod of their own (kubernetes.pool.sealed 0)") {
		t.Errorf("poolCheck without the agent-sandbox pool = %q", c.msg)
	}
}
