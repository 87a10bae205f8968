package host

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
)

// sessionSettleTimeout bounds the settlement of a session turn's seconds,
// which runs detached from the turn so that a stopped turn still counts.
const sessionSettleTimeout = 5 * time.Second

// turnBudget keeps the daily budgets around session turns as the sealed
// runtime keeps them around its own: a turn whose speaker, channel or
// installation has nothing left is refused before its container starts,
// and each turn reserves its whole deadline in seconds and settles the
// seconds it ran. (Broker calls and tokens are the brokers' to count.)
// The zero value, no ledger, passes every turn.
type turnBudget struct {
	ledger  *budget.Ledger
	timeout time.Duration // session.turn_timeout
	log     *slog.Logger
}

// run runs turn under b's budgets.
func (tb turnBudget) run(ctx context.Context, b rtsandbox.Binding, turn func() (rtsandbox.Answer, error)) (rtsandbox.Answer, error) {
	l := tb.ledger
	if l == nil {
		return turn()
	}
	day, scopes := l.Today(), budget.Scopes(b.Channel, b.Speaker.PrincipalID)
	if err := l.Check(ctx, day, scopes); err != nil {
		return rtsandbox.Answer{}, fmt.Errorf("session: %w", err)
	}
	res, err := l.Reserve(ctx, day, scopes, budget.Seconds, ceilSeconds(tb.timeout))
	if err != nil {
		return rtsandbox.Answer{}, fmt.Errorf("session: %w", err)
	}
	began := time.Now()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionSettleTimeout)
		defer cancel()
		if err := l.Settle(sctx, res, ceilSeconds(time.Since(began))); err != nil {
			tb.log.Error("session: budget settlement failed", "channel", string(b.Channel), "err", err)
		}
	}()
	return turn()
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
