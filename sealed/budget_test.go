package sealed

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

func openLedger(t *testing.T, cfg budget.Config) *budget.Ledger {
	t.Helper()
	dir := filepath.Join(shortTempDir(t), "usage")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := budget.Open(filepath.Join(dir, budget.FileName), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func usageOf(t *testing.T, l *budget.Ledger, scope string, k budget.Kind) budget.Entry {
	t.Helper()
	es, err := l.Usage(context.Background(), l.Today(), scope)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == k {
			return e
		}
	}
	return budget.Entry{}
}

// A turn reserves its whole deadline in seconds and settles the seconds it
// ran, rounded up; nothing stays reserved.
func TestTurnSecondsSettled(t *testing.T) {
	l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Seconds: 600}})
	f := newFixture(t, func(f *fixture) {
		f.cfg.Budget = l
		f.opts.Budget = l
	})
	f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "hi"}, nil
	}
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello"); err != nil {
		t.Fatalf("RunTurn = %v", err)
	}
	for _, scope := range budget.Scopes("fake:a", "p_guest") {
		if e := usageOf(t, l, scope, budget.Seconds); e.Used != 1 || e.Reserved != 0 {
			t.Errorf("%s seconds = %+v; want 1 used, 0 reserved", scope, e)
		}
	}
}

// A turn whose speaker spent a daily budget is refused with
// rtsandbox.ErrOverBudget before any container is started; another
// speaker goes on.
func TestOverBudgetTurnRefusedBeforeContainer(t *testing.T) {
	model := newModelServer(t, completion("one"), completion("two"))
	l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Calls: 1}})
	f := newFixture(t, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.cfg.Budget = l
		f.opts.Budget = l
	})
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		mustPost(t, ctx, spec, wire.RouteModel, `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`)
		return rtsandbox.Reply{OK: true, Text: "hi"}, nil
	}
	ctx := context.Background()
	if _, err := f.rt.RunTurn(ctx, rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "first"); err != nil {
		t.Fatalf("first RunTurn = %v", err)
	}
	_, err := f.rt.RunTurn(ctx, rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "second")
	if !errors.Is(err, rtsandbox.ErrOverBudget) {
		t.Fatalf("second RunTurn = %v; want ErrOverBudget", err)
	}
	if n := len(f.driver.gotSpecs()); n != 1 {
		t.Errorf("containers run = %d; want 1", n)
	}
	if _, err := f.rt.RunTurn(ctx, rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("other")}, "third"); err != nil {
		t.Errorf("another speaker's RunTurn = %v", err)
	}
	if e := usageOf(t, l, budget.SpeakerScope("p_guest"), budget.Seconds); e.Reserved != 0 {
		t.Errorf("refused turn left %d seconds reserved", e.Reserved)
	}
}

// A worker that fails because the broker refused a call for a daily
// budget mid-turn ends in rtsandbox.ErrOverBudget (the guest's budget
// text), not a plain worker failure.
func TestMidTurnDailyBudgetIsOverBudget(t *testing.T) {
	model := newModelServer(t,
		completion(nil, toolCall("c1", "whom", `{}`)),
		completion("never reached"))
	l := openLedger(t, budget.Config{PerChannel: budget.Limits{Calls: 1}})
	f := newFixture(t, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.cfg.Tools = []broker.Tool{hostTool("whom", func(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
			return "guest", nil
		})}
		f.cfg.Budget = l
		f.opts.Budget = l
	})
	f.driver.run = runWorker
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hello")
	if !errors.Is(err, rtsandbox.ErrOverBudget) || !errors.Is(err, container.ErrWorkerFailed) {
		t.Fatalf("RunTurn = %+v, %v; want ErrOverBudget wrapping the worker failure", reply, err)
	}
	if n := len(model.gotBodies()); n != 1 {
		t.Errorf("upstream calls = %d; want 1", n)
	}
}
