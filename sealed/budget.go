package sealed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/container"
)

// settleTimeout bounds the settlement of a turn's seconds, which runs
// detached from the turn so that a stopped turn is still counted.
const settleTimeout = 5 * time.Second

// settleFunc records a turn's seconds once it ended: from slotted (zero
// when the turn never got a slot, which then costs nothing) to now.
type settleFunc func(slotted time.Time)

// reserveTurn refuses a turn whose speaker, channel or installation has
// nothing left of a daily budget, and reserves the turn's whole deadline
// in seconds, before any directory, socket or container exists. Without a
// ledger it costs nothing.
func (r *Runtime) reserveTurn(ctx context.Context, channel rtsandbox.ChannelKey, sp rtsandbox.Speaker) (settleFunc, error) {
	l := r.s.Budget
	if l == nil {
		return func(time.Time) {}, nil
	}
	day, scopes := l.Today(), budget.Scopes(channel, sp.PrincipalID)
	if err := l.Check(ctx, day, scopes); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	res, err := l.Reserve(ctx, day, scopes, budget.Seconds, seconds(r.s.TurnTimeout))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return func(slotted time.Time) {
		var spent int64
		if !slotted.IsZero() {
			spent = seconds(time.Since(slotted))
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if err := l.Settle(ctx, res, spent); err != nil {
			r.s.Logger.Error("sandbox: budget settlement failed", "channel", string(channel), "err", err)
		}
	}, nil
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// overBudget marks a worker failure caused by a daily budget the broker
// refused mid-turn (429 daily_budget), so that the guest gets the budget
// text rather than the failure text.
func overBudget(err error, workerClass string, refused bool) error {
	if err != nil && refused && workerClass == container.WorkerBudgetExhausted &&
		errors.Is(err, container.ErrWorkerFailed) {
		return fmt.Errorf("%w: %w", rtsandbox.ErrOverBudget, err)
	}
	return err
}
