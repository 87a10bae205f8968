package broker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/modelapi"
)

// settleTimeout bounds a settlement, which runs detached from the call so
// that a call cut short is still counted.
const settleTimeout = 5 * time.Second

// reserve reserves amount of kind in the turn's scopes: its speaker,
// channel and the installation, or the ones it was given (Turn.scopes).
// A spent budget answers 429 daily_budget and marks the turn; a ledger
// that fails fails the call (closed).
func (t *Turn) reserve(ctx context.Context, k budget.Kind, amount int64) (budget.Reservation, outcome, bool) {
	l := t.b.cfg.Budget
	scopes := t.scopes
	if scopes == nil {
		scopes = budget.Scopes(t.binding.Channel, t.binding.Speaker.PrincipalID)
	}
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

// tokenEstimate is what a model call reserves: about four bytes of the
// request per prompt token, each of its images (as in counts them) at
// modelapi.ImageTokens instead of its bytes, plus every output token it
// may ask for.
func tokenEstimate(payload []byte, in imageCounter, maxOutput int) int64 {
	images, imageBytes := in.Images()
	return int64(max(0, len(payload)-imageBytes)/4 + images*modelapi.ImageTokens + maxOutput)
}

// imageCounter is a rebuilt model request that counts its images
// (modelapi.ChatInput, modelapi.MessagesRequest).
type imageCounter interface{ Images() (n, size int) }

// usedTokens is what a model call cost: the upstream's usage, as counted
// from a streamed answer's events or read from a whole answer already
// checked as JSON (usage.total_tokens, or prompt_tokens+completion_tokens,
// or the Messages API's input and output tokens). A call refused or
// answered with an error status costs nothing; an answer without usage, or
// one refused or cut off for echoing the credential, costs the estimate.
// The usage member is the one the reflection scan found (outcome.usage)
// when it was sure of it; only otherwise is the whole answer decoded
// again, which costs about 8 ms per MiB.
func usedTokens(o outcome, estimate int64) int64 {
	switch {
	case o.reflected:
		return estimate
	case o.status != statusOK:
		return 0
	case o.counted:
		return o.tokens
	case o.written:
		return estimate
	}
	var usage *usageFields
	if o.usageKnown {
		if o.usage == nil || json.Unmarshal(o.usage, &usage) != nil {
			return estimate
		}
	} else {
		var resp struct {
			Usage *usageFields `json:"usage"`
		}
		if json.Unmarshal(o.body, &resp) != nil {
			return estimate
		}
		usage = resp.Usage
	}
	if usage == nil {
		return estimate
	}
	if n, ok := usage.total(); ok {
		return n
	}
	return estimate
}

// usageMember is the top-level member of a model answer that holds its
// usage, in both dialects.
const usageMember = "usage"

// usageFields is a usage object of either dialect.
type usageFields struct {
	Prompt     *int64 `json:"prompt_tokens"`
	Completion *int64 `json:"completion_tokens"`
	Total      *int64 `json:"total_tokens"`
	// Anthropic Messages.
	Input       *int64 `json:"input_tokens"`
	Output      *int64 `json:"output_tokens"`
	CacheCreate *int64 `json:"cache_creation_input_tokens"`
	CacheRead   *int64 `json:"cache_read_input_tokens"`
}

// total is the tokens a usage object counts, and whether it counts any.
func (u *usageFields) total() (int64, bool) {
	switch {
	case u.Total != nil && *u.Total >= 0:
		return *u.Total, true
	case u.Prompt != nil && u.Completion != nil && *u.Prompt >= 0 && *u.Completion >= 0:
		return *u.Prompt + *u.Completion, true
	}
	in, out := u.messages()
	return in + out, u.Input != nil || u.Output != nil
}

// messages returns the input (cache writes and reads included) and output
// tokens of a Messages usage object; absent or negative fields count 0.
func (u *usageFields) messages() (in, out int64) {
	for _, p := range []*int64{u.Input, u.CacheCreate, u.CacheRead} {
		if p != nil && *p > 0 {
			in += *p
		}
	}
	if u.Output != nil && *u.Output > 0 {
		out = *u.Output
	}
	return in, out
}
