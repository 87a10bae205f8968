package httpapi

import (
	"net/http"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// sandboxResponse answers the sandbox switch.
type sandboxResponse struct {
	Channel string `json:"channel"`
	Enabled bool   `json:"enabled"`
	Message string `json:"message"`
}

// handleSandboxStatus reports whether the channel is sandboxed.
func handleSandboxStatus(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		channel, ok := ownerChannel(w, r)
		if ok {
			a.command(w, r, channel, router.ActionStatus)
		}
	})
}

// handleSandboxSet turns sandbox routing on or off: {"enabled": bool}.
func handleSandboxSet(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		channel, ok := ownerChannel(w, r)
		if !ok {
			return
		}
		d, status, text := newDecoder(w, r)
		if d == nil {
			writeError(w, status, text)
			return
		}
		var enabled, saw bool
		msg := d.object("", func(key string) string {
			if key != "enabled" {
				return unknown(key)
			}
			saw = true
			return d.boolean(key, &enabled)
		})
		if msg == "" {
			msg = d.end()
		}
		if msg == "" && !saw {
			msg = "enabled: required"
		}
		switch {
		case d.tooLarge():
			writeError(w, http.StatusRequestEntityTooLarge, textBodyTooLarge)
			return
		case msg != "":
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		action := router.ActionOff
		if enabled {
			action = router.ActionOn
		}
		a.command(w, r, channel, action)
	})
}

func ownerChannel(w http.ResponseWriter, r *http.Request) (rtsandbox.ChannelKey, bool) {
	channel, msg := checkChannel(r.PathValue("key"))
	if msg != "" {
		writeError(w, http.StatusBadRequest, "channel: "+msg)
		return "", false
	}
	return channel, true
}

// command runs an owner command through the router, which re-checks that
// "http:<OwnerID>" is an owner and runs the change on the channel's queue,
// after the turns already queued there.
func (a *API) command(w http.ResponseWriter, r *http.Request, channel rtsandbox.ChannelKey, action string) {
	if a.opts.OwnerID == "" {
		writeError(w, http.StatusForbidden, textOwnerCommands)
		return
	}
	text, err := a.router.Command(r.Context(), router.Command{
		Channel: channel, Action: action,
		Author: router.Author{ID: a.opts.OwnerID, Name: a.opts.OwnerID},
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("owner command", "channel", channel, "action", action)
	writeJSON(w, http.StatusOK, sandboxResponse{Channel: string(channel), Enabled: text == router.EnabledText, Message: text})
}
