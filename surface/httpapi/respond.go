package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Fixed texts of error bodies. Validation errors name the key instead.
const (
	textUnauthorized  = "missing or wrong bearer token"
	textOwnerToken    = "this endpoint needs the owner token (http.owner_token_env), not the guest token"
	textOrigin        = "browser requests are not accepted"
	textHost          = "the Host header must name this machine"
	textNotFound      = "no such endpoint"
	textMethod        = "method not allowed"
	textStopping      = "the host is shutting down"
	textChannelFull   = "too many messages are waiting in this channel"
	textHostFull      = "too many messages are waiting"
	textSubscribers   = "too many event streams are open"
	textWaitTimeout   = "the reply did not arrive in time; it will still be posted as an event"
	textCancelled     = "the request was cancelled"
	textInternal      = "something went wrong; the details are in the log"
	textContentType   = "Content-Type must be application/json"
	textBodyTooLarge  = "request body too large"
	textOwnerCommands = "owner commands over HTTP are not configured"
	textNoBudgets     = "no budgets are configured"
)

// Fixed texts refusing a message with attachments the API has no room
// for now (503, Retry-After).
const (
	textUploadsBusy     = "too many uploads are in progress; try again later"
	textAttachmentsHeld = "too many attachments are waiting; try again later"
)

// failure maps an error class to a status and a fixed text. Unknown errors
// are internal: 500, logged.
func failure(err error) (int, string, bool) {
	switch {
	case errors.Is(err, router.ErrStopping):
		return http.StatusServiceUnavailable, textStopping, true
	case errors.Is(err, router.ErrQueueFull):
		return http.StatusTooManyRequests, textChannelFull, true
	case errors.Is(err, errHostFull):
		return http.StatusServiceUnavailable, textHostFull, true
	case errors.Is(err, errTooManySubscribers):
		return http.StatusServiceUnavailable, textSubscribers, true
	case errors.Is(err, router.ErrNotOwner):
		return http.StatusForbidden, rtsandbox.NotOwnerText, true
	case errors.Is(err, rtsandbox.ErrWorkspaceFull): // a session channel's own bound; logged by the router
		return http.StatusInsufficientStorage, rtsandbox.WorkspaceFullText, true
	case errors.Is(err, syscall.ENOSPC): // logged by the router
		return http.StatusInsufficientStorage, rtsandbox.DiskFullText, true
	case errors.Is(err, context.Canceled): // the client went; nobody reads this
		return http.StatusRequestTimeout, textCancelled, true
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, textWaitTimeout, true
	}
	return http.StatusInternalServerError, textInternal, false
}

// refusalText is the fixed text of a refused message.
func refusalText(err error) string {
	_, text, _ := failure(err)
	return text
}

// dropReason is the drop reason of a message error: the router's, or the
// API's own for the bounds it keeps; "" when err is no drop.
func dropReason(err error) string {
	switch {
	case errors.Is(err, errHostFull):
		return router.DropQueueFull
	}
	return router.Reason(err)
}

// fail writes err's status and fixed text; unexpected errors are logged.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	a.failWith(w, r, err, "")
}

// failMessage is fail for a message: the body names the drop reason too
// when err dropped it (a full queue, a shutdown).
func (a *API) failMessage(w http.ResponseWriter, r *http.Request, err error) {
	a.failWith(w, r, err, dropReason(err))
}

func (a *API) failWith(w http.ResponseWriter, r *http.Request, err error, reason string) {
	status, text, known := failure(err)
	if !known {
		a.log.Error("http request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "30")
	}
	writeJSON(w, status, errorBody{Error: text, Reason: reason})
}

type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"` // a router.Drop* reason for a dropped message
}

func writeError(w http.ResponseWriter, status int, text string) {
	writeJSON(w, status, errorBody{Error: text})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // our own response types: cannot happen
		status, body = http.StatusInternalServerError, []byte(`{"error":"`+textInternal+`"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// writeDeadline is the time one write of about n bytes may take:
// writeTimeout, and a second more per MiB (a client reading at 1 MiB/s
// keeps up with the largest reply files).
func writeDeadline(n int) time.Duration {
	return writeTimeout + time.Duration(n>>20)*time.Second
}
