package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
)

// specRecorder is a OneShot that keeps each spec and fails the run.
type specRecorder struct {
	mu    sync.Mutex
	specs []container.Spec
}

func (r *specRecorder) Run(_ context.Context, spec container.Spec, _ []byte) (container.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, spec)
	return container.Result{ExitCode: -1}, errors.New("recorded")
}

func (r *specRecorder) Reap(context.Context, string) (int, error) { return 0, nil }

// TestSealedRuntimeTakesSandboxRuntime: a sealed turn's container spec
// names sandbox.runtime.
func TestSealedRuntimeTakesSandboxRuntime(t *testing.T) {
	state, err := os.MkdirTemp("", "rtsr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	user := ""
	if os.Geteuid() == 0 {
		user = "  user: \"1000:1000\"\n"
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "state_dir: %s\nmodel: {url: \"https://api.example/v1/chat/completions\", name: m, api_key_env: KEY}\nsandbox:\n  runtime: runsc\n%s", state, user))
	if err != nil {
		t.Fatal(err)
	}
	rec := &specRecorder{}
	rt, err := NewSealedRuntime(cfg, mapEnv(map[string]string{"KEY": "k"}), SealedOptions{Driver: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, _ = rt.Runtime.RunTurn(context.Background(), rtsandbox.Binding{Channel: "http:lobby", Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"}}, "hi")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.specs) != 1 || rec.specs[0].Runtime != container.RuntimeRunsc {
		t.Errorf("specs %+v; want one naming runsc", rec.specs)
	}
}
