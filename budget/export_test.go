package budget

import "time"

// SetClock sets the clock of the store's unavailability (StoreGrace).
func SetClock(l *Ledger, clock func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock = clock
}
