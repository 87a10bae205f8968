package broker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
)

// settleTimeout bounds a settlement, which runs detached from the call so
// that a call cut short is still counted.
const settleTimeout = 5 * time.Second

// reserve reserves amount of kind for the turn's speaker, channel and the
// installation. A spent budget answers 429 daily_budget and marks the
// turn; a ledger that fails fails the call (closed).
func (t *Turn) reserve(ctx context.Context, k budget.Kind, amount int64) (budget.Reservation, outcome, bool) {
	l := t.b.cfg.Budget
	scopes := budget.Scopes(t.binding.Channel, t.binding.Speaker.PrincipalID)
	r, err := l.Reserve(ctx, l.Today(), scopes, k, amount)
	switch {
	case errors.Is(err, rtsandbox.ErrOverBudget):
		t.overBudget.Store(true)
		o := refuse(refDailyBudget)
		o.detail = "daily " + string(k) + " budget spent"
		return r, o, false
	case err != nil:
		return r, fail("budget ledger failed"), false
	}
	return r, outcome{}, true
}

// settle records what a reservation actually cost. A failure is logged:
// the call already happened.
func (t *Turn) settle(r budget.Reservation, actual int64) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := t.b.cfg.Budget.Settle(ctx, r, actual); err != nil {
		t.b.log.Error("budget settlement failed", "channel", string(t.binding.Channel), "kind", string(r.Kind), "err", err)
	}
}

// tokenEstimate is what a /model call reserves: about four bytes of the
// request per prompt token, plus every output token it may ask for.
func tokenEstimate(payload []byte, maxOutput int) int64 {
	return int64(len(payload)/4 + maxOutput)
}

// usedTokens is what a /model call cost: the upstream's usage.total_tokens
// (or prompt_tokens+completion_tokens) from an answer already checked as
// JSON. A call with no answer costs nothing; an answer without usage, or
// one refused for echoing the credential, costs the estimate.
func usedTokens(o outcome, estimate int64) int64 {
	if o.status != statusOK {
		if o.reflected {
			return estimate
		}
		return 0
	}
	var resp struct {
		Usage *struct {
			Prompt     *int64 `json:"prompt_tokens"`
			Completion *int64 `json:"completion_tokens"`
			Total      *int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(o.body, &resp) != nil || resp.Usage == nil {
		return estimate
	}
	u := resp.Usage
	switch {
	case u.Total != nil && *u.Total >= 0:
		return *u.Total
	case u.Prompt != nil && u.Completion != nil && *u.Prompt >= 0 && *u.Completion >= 0:
		return *u.Prompt + *u.Completion
	}
	return estimate
}
