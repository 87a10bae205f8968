package httpapi

import "github.com/rtsandbox/rtsandbox"

// held returns the messages the API holds for channel (tests).
func (a *API) held(channel rtsandbox.ChannelKey) int { return a.heldIn(channel) }
