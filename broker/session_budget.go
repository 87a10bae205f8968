package broker

import (
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// overBudget is the error of a finished session turn: d's own, or, when
// the worker answered ok:false after the bound turn had a call refused for
// a daily budget (429 daily_budget), one wrapping rtsandbox.ErrOverBudget.
// The worker only sees a 429, which the max_calls budget answers too; the
// broker knows which it was, as the sealed runtime's turn does.
func overBudget(bound *scope, d pendingDone) error {
	if d.err != nil || d.result.OK || bound == nil || !bound.turn.OverBudget() {
		return d.err
	}
	return fmt.Errorf("%w: the worker's turn failed after a daily budget refusal: %s", rtsandbox.ErrOverBudget, d.result.Error)
}
