package httpapi

import "github.com/rtsandbox/rtsandbox"

// held returns the messages the API holds for channel (tests).
func (a *API) held(channel rtsandbox.ChannelKey) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.lanes[channel]; l != nil {
		return l.size()
	}
	return 0
}
