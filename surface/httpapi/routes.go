package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox/router"
)

// Handler returns the API's routes behind its hardening. The whole route
// table:
//
//	GET  /healthz                           liveness, no token
//	GET  /readyz                            readiness, no token
//	POST /api/v1/messages                   guest token
//	GET  /api/v1/events                     guest token
//	GET  /api/v1/channels/{key}/sandbox     owner token
//	POST /api/v1/channels/{key}/sandbox     owner token
//	POST /api/v1/channels/{key}/fresh       owner token
//	POST /api/v1/channels/{key}/stop        owner token
//	GET  /api/v1/channels/{key}/usage       owner token
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", methods{http.MethodGet: handleHealth(a)})
	mux.Handle("/readyz", methods{http.MethodGet: handleReady(a)})
	mux.Handle("/api/v1/messages", methods{http.MethodPost: a.guest(handlePostMessage(a))})
	mux.Handle("/api/v1/events", methods{http.MethodGet: a.guest(handleEvents(a))})
	mux.Handle("/api/v1/channels/{key}/sandbox", methods{
		http.MethodGet:  a.owner(handleSandboxStatus(a)),
		http.MethodPost: a.owner(handleSandboxSet(a)),
	})
	mux.Handle("/api/v1/channels/{key}/fresh", methods{http.MethodPost: a.owner(handleOwnerAction(a, router.ActionFresh))})
	mux.Handle("/api/v1/channels/{key}/stop", methods{http.MethodPost: a.owner(handleOwnerAction(a, router.ActionStop))})
	mux.Handle("/api/v1/channels/{key}/usage", methods{http.MethodGet: a.owner(handleUsage(a))})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, textNotFound)
	}))
	return a.harden(mux)
}

// NewServer returns an http.Server for h with timeouts and a header bound.
// There is no overall write timeout because waiting requests and event
// streams are long; handlers set their own write deadlines instead.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// methods dispatches on the request method; others get a JSON 405.
type methods map[string]http.Handler

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := m[r.Method]; h != nil {
		h.ServeHTTP(w, r)
		return
	}
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, textMethod)
}

// harden refuses browser-shaped requests and foreign Host headers before
// any route runs, and marks every answer uncacheable. There is no CORS:
// no Access-Control-* header is ever sent, so preflights fail. A panic in
// a handler is logged here (net/http would log it through ErrorLog with
// its value, which could quote a request) and aborts that response only.
func (a *API) harden(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { // net/http's own way to abort: pass it on
					panic(p)
				}
				a.log.Error("recovered from a panic", "where", "http handler", "method", r.Method, "path", r.URL.Path,
					"panic", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
				panic(http.ErrAbortHandler) // the response may be half written: abort it quietly
			}
		}()
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		if o := r.Header.Values("Origin"); len(o) > 0 && (len(o) > 1 || !a.origins[o[0]]) {
			a.log.Warn("refused a browser request", "origin", o, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, textOrigin)
			return
		}
		if a.opts.LoopbackHosts && !loopbackHost(r.Host) {
			a.log.Warn("refused a request for another host", "host", r.Host, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, textHost)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names localhost or a loopback
// address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (a *API) guest(next http.Handler) http.Handler {
	return a.bearer(a.opts.Token, nil, next)
}

func (a *API) owner(next http.Handler) http.Handler {
	token := func() string {
		if a.opts.OwnerToken == nil {
			return ""
		}
		owner := a.opts.OwnerToken()
		// An owner token equal to the guest token would make every guest
		// token holder the owner: owner actions are then refused.
		if a.opts.Token != nil && owner != "" && owner == a.opts.Token() {
			a.log.Error("the owner token equals the guest token: owner actions are refused until they differ")
			return ""
		}
		return owner
	}
	return a.bearer(token, a.opts.Token, next)
}

// bearer admits a request whose bearer token equals token(), read now.
// An empty token admits nobody. On an owner route, lesser is the guest
// token: a request that presents it is authenticated but not allowed, and
// gets 403 saying the owner token is needed, not the 401 of a wrong token.
// Every refusal is logged with its reason, never with a token.
func (a *API) bearer(token, lesser func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Values("Authorization")
		if tokenMatches(header, token()) {
			next.ServeHTTP(w, r)
			return
		}
		if lesser != nil && tokenMatches(header, lesser()) {
			a.refusalLog(r, "the guest token on an owner route")
			writeError(w, http.StatusForbidden, textOwnerToken)
			return
		}
		reason := "a wrong bearer token"
		if len(header) == 0 {
			reason = "no bearer token"
		}
		a.refusalLog(r, reason)
		w.Header().Set("WWW-Authenticate", `Bearer realm="rtsandbox"`)
		writeError(w, http.StatusUnauthorized, textUnauthorized)
	})
}

// refusalLog logs a refused request: its reason, method, path and peer;
// never a header's value. A flood of refusals logs a bounded number of
// lines (refusalLines) and counts the rest into the next line it logs.
func (a *API) refusalLog(r *http.Request, reason string) {
	if n, ok := a.refusals.allow(time.Now()); ok {
		a.log.Warn("refused a request", "reason", reason, "method", r.Method, "path", r.URL.Path,
			"remote", r.RemoteAddr, "unlogged_before", n)
	}
}

// tokenMatches compares in constant time; hashing first hides the length
// of the configured token as well.
func tokenMatches(header []string, want string) bool {
	if want == "" || len(header) != 1 {
		return false
	}
	scheme, got, ok := strings.Cut(header[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || got == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// handleHealth is liveness: the process answers, so it is 200 even while
// it drains (a restart would only cut the drain short); the body says
// whether it still takes messages.
func handleHealth(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			OK       bool `json:"ok"`
			Draining bool `json:"draining"`
		}{true, a.draining()})
	})
}

// handleReady is readiness: 503 from the start of a drain and while the
// host's own check (Options.Ready: the container engine, say) fails, with
// a fixed reason; 200 otherwise. Details go to the operator log.
func handleReady(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		type ready struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason,omitempty"`
		}
		if a.draining() {
			writeJSON(w, http.StatusServiceUnavailable, ready{Reason: "draining"})
			return
		}
		if a.opts.Ready != nil {
			if err := a.opts.Ready(r.Context()); err != nil {
				a.log.Warn("not ready", "err", err)
				writeJSON(w, http.StatusServiceUnavailable, ready{Reason: "degraded"})
				return
			}
		}
		writeJSON(w, http.StatusOK, ready{Ready: true})
	})
}
