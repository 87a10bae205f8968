package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// maxActionBody bounds the body of fresh and stop, which take none.
const maxActionBody = 1 << 10

// sandboxResponse answers the sandbox switch.
type sandboxResponse struct {
	Channel string `json:"channel"`
	Enabled bool   `json:"enabled"`
	Message string `json:"message"`
}

// actionResponse answers fresh and stop with the router's fixed text.
type actionResponse struct {
	Channel string `json:"channel"`
	Message string `json:"message"`
}

// handleSandboxStatus reports whether the channel is sandboxed.
func handleSandboxStatus(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		channel, ok := ownerChannel(w, r)
		if !ok {
			return
		}
		if text, ok := a.command(w, r, channel, router.ActionStatus); ok {
			// status may end with the channel's usage line.
			enabled := strings.HasPrefix(text, rtsandbox.EnabledPrefix)
			writeJSON(w, http.StatusOK, sandboxResponse{Channel: string(channel), Enabled: enabled, Message: text})
		}
	})
}

// handleOwnerAction runs fresh or stop: fresh waits behind the channel's
// queued turns (like on and off) and makes the next turn start a fresh
// conversation; stop aborts the running turn at once. The body is empty
// or {}.
func handleOwnerAction(a *API, action string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		channel, ok := ownerChannel(w, r)
		if !ok {
			return
		}
		if status, text := emptyBody(w, r); status != 0 {
			writeError(w, status, text)
			return
		}
		if text, ok := a.command(w, r, channel, action); ok {
			writeJSON(w, http.StatusOK, actionResponse{Channel: string(channel), Message: text})
		}
	})
}

// emptyBody accepts no body or an empty JSON object, and otherwise returns
// the status and text to answer: a key is refused by name.
func emptyBody(w http.ResponseWriter, r *http.Request) (int, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	if _, big := errors.AsType[*http.MaxBytesError](err); big {
		return http.StatusRequestEntityTooLarge, textBodyTooLarge
	}
	if err != nil {
		return http.StatusBadRequest, "body: could not be read"
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, ""
	}
	if !checkJSON(r) {
		return http.StatusUnsupportedMediaType, textContentType
	}
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(body))}
	msg := d.object("", unknown)
	if msg == "" {
		msg = d.end()
	}
	if msg != "" {
		return http.StatusBadRequest, msg
	}
	return 0, ""
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
		if text, ok := a.command(w, r, channel, action); ok {
			// status may end with the channel's usage line.
			enabled := strings.HasPrefix(text, rtsandbox.EnabledPrefix)
			writeJSON(w, http.StatusOK, sandboxResponse{Channel: string(channel), Enabled: enabled, Message: text})
		}
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
// "http:<OwnerID>" is an owner and runs on, off, status and fresh on the
// channel's queue, after the turns already queued there (stop does not
// wait). It returns the router's fixed text, or answers the request with
// the failure and returns false.
func (a *API) command(w http.ResponseWriter, r *http.Request, channel rtsandbox.ChannelKey, action string) (string, bool) {
	if a.opts.OwnerID == "" {
		writeError(w, http.StatusForbidden, textOwnerCommands)
		return "", false
	}
	text, err := a.router.Command(r.Context(), router.Command{
		Channel: channel, Action: action,
		Author: router.Author{ID: a.opts.OwnerID, Name: a.opts.OwnerID},
	})
	if err != nil {
		a.fail(w, r, err)
		return "", false
	}
	a.log.Info("owner command", "channel", channel, "action", action)
	return text, true
}

// handleUsage answers today's budget usage of the channel and of the whole
// installation (Options.Usage), for the owner.
func handleUsage(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		channel, ok := ownerChannel(w, r)
		if !ok {
			return
		}
		if a.opts.OwnerID == "" {
			writeError(w, http.StatusForbidden, textOwnerCommands)
			return
		}
		if a.opts.Usage == nil {
			writeError(w, http.StatusNotFound, textNoBudgets)
			return
		}
		report, err := a.opts.Usage(r.Context(), channel)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, report)
	})
}
