package broker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/wire"
)

// A session turn whose worker gives up after the broker refused a call
// for a daily budget ends over budget (the guest gets the budget text, as
// in sealed mode); a worker's ok:false without such a refusal, or a turn
// that still succeeded, stays what it was.
func TestSessionExecuteOverBudget(t *testing.T) {
	tests := []struct {
		name     string
		calls    int // model calls the worker makes
		result   string
		wantOver bool
	}{
		{"failed after a daily budget refusal", 2, `{"ok":false,"error":"prompt failed: status 429"}`, true},
		{"failed without a refusal", 1, `{"ok":false,"error":"prompt failed: status 500"}`, false},
		{"succeeded after a refusal", 2, `{"ok":true,"text":"partial","files":[]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Calls: 1}})
			f := newSession(t, sessOptions{broker: func(c *broker.Config) { c.Budget = l }})
			f.bindAs(sessChannel, rtsandbox.Speaker{ID: "guest", Name: "Guest", PrincipalID: "p_guest"}, "")
			exec := f.execute(context.Background(), sessTurn(sessTurnID))
			wantResp(t, f.do("GET", wire.RouteWorkerNext, ""), 200, "")
			for i := range tt.calls {
				want := 200
				if i > 0 {
					want = 429
				}
				wantResp(t, f.post(wire.RouteAnthropicMessages, `{"model":"m","max_tokens":10,"messages":`+userHi+`}`), want, "")
			}
			wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":`+tt.result+`}`), 200, "")
			got := waitExec(t, exec)
			if over := errors.Is(got.Err, rtsandbox.ErrOverBudget); over != tt.wantOver {
				t.Errorf("Execute error = %v; over budget %v, want %v", got.Err, over, tt.wantOver)
			}
			if !tt.wantOver && got.Err != nil {
				t.Errorf("Execute error = %v; want the result only", got.Err)
			}
		})
	}
}
