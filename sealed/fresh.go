package sealed

import "github.com/rtsandbox/rtsandbox"

// generations counts the "start fresh" requests of each channel that no
// successful turn has consumed yet (docs/sealed-turn.md, "The sealed turn"). They live in memory only: a
// restart forgets pending resets.
type generations map[rtsandbox.ChannelKey]uint64

// StartFresh asks that the channel's next turn start without history. A
// request made while a turn runs (even one not yet listening) is kept for
// the turn after it. Errors: rtsandbox.ErrChannelKey for an invalid key.
func (r *Runtime) StartFresh(channel rtsandbox.ChannelKey) error {
	if !channel.Valid() {
		return rtsandbox.ErrChannelKey
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fresh[channel]++
	return nil
}

// clearFresh consumes the pending reset after a turn that ran with the
// snapshot gen replied ok, unless a newer StartFresh arrived meanwhile.
// A failed turn leaves the reset pending for the next one.
func (r *Runtime) clearFresh(channel rtsandbox.ChannelKey, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fresh[channel] == gen {
		delete(r.fresh, channel)
	}
}
