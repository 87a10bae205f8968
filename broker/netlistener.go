package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// The network listener's limits (docs/broker.md, "The network listener").
const (
	// MaxNetConns is how many connections the network listener serves at
	// once: every turn of the host shares it, where a socket serves one.
	MaxNetConns = 256
	// SourceFailures is how many refused requests a source address may
	// make in SourceWindow; past it, its requests are refused before their
	// token is read, until the window ends. 256-bit tokens cannot be
	// guessed at any rate: the limit keeps a noisy neighbour's refusals
	// cheap and its log lines few.
	SourceFailures = 20
	SourceWindow   = time.Minute
	// maxSources bounds the failure table. When it is full of live
	// windows, a new source's failures go uncounted (still refused): an
	// attacker with many addresses can fill the table but never lock a
	// worker out.
	maxSources = 4096
)

// refToken is the one answer to a request without a live token of its
// own: missing, malformed, unknown, revoked, or from a source over its
// limit. One status, one body: nothing tells the cases apart.
var refToken = refusal{http.StatusUnauthorized, "unauthorized", "token_refused"}

// NetOptions configure the network listener: ListenOptions' deadlines and
// logger, and TLS when the operator gave a certificate (nil: plain TCP).
type NetOptions struct {
	ListenOptions
	TLS *tls.Config
}

// ListenNet serves the turns of tokens on addr (host:port): every request
// must carry a live token in TokenHeader, which selects its turn's handler;
// the header is removed before that handler runs, so every rule of the
// socket (routes, headers, budgets, reflection, the turn's binding) holds
// unchanged behind it. With opts.TLS it serves TLS 1.2 or later only.
func ListenNet(addr string, tokens *Tokens, opts NetOptions) (*Server, error) {
	opts.defaults()
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("broker listen %s: %w", addr, err)
	}
	if opts.TLS != nil {
		cfg := opts.TLS.Clone()
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
		raw = tls.NewListener(raw, cfg)
	}
	g := &gate{tokens: tokens, sources: newSourceLimiter(), log: opts.Logger, now: time.Now}
	s := &Server{ln: newCapListener(raw, MaxNetConns), done: make(chan error, 1)}
	s.addr = raw.Addr()
	s.srv = newHTTPServer(g, opts.ListenOptions)
	go func() { s.done <- s.srv.Serve(s.ln) }()
	return s, nil
}

// Addr is the network listener's address (nil for a socket's Server).
func (s *Server) Addr() net.Addr { return s.addr }

// gate admits a request by its token and hands it to its turn's handler.
type gate struct {
	tokens  *Tokens
	sources *sourceLimiter
	log     *slog.Logger
	now     func() time.Time
}

// Refusal kinds, for the operator log only.
const (
	kindMissing   = "missing"
	kindMalformed = "malformed"
	kindUnknown   = "unknown or revoked"
	kindLimited   = "source over its limit"
)

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src := sourceOf(r.RemoteAddr)
	now := g.now()
	if g.sources.limited(src, now) {
		g.refuse(w, src, kindLimited, now)
		return
	}
	vals := r.Header.Values(TokenHeader)
	var h http.Handler
	kind := kindMissing
	switch {
	case len(vals) != 1:
		if len(vals) > 1 {
			kind = kindMalformed
		}
	case !wellFormed(vals[0]):
		kind = kindMalformed
	default:
		if h = g.tokens.handler(vals[0]); h == nil {
			kind = kindUnknown
		}
	}
	if h == nil {
		g.sources.fail(src, now)
		g.refuse(w, src, kind, now)
		return
	}
	r.Header.Del(TokenHeader)
	h.ServeHTTP(w, r)
}

// refuse writes the one refusal and logs it, at most one line per source
// and window (the token is never logged: only its kind of failure).
func (g *gate) refuse(w http.ResponseWriter, src netip.Addr, kind string, now time.Time) {
	if g.sources.firstLog(src, now) {
		g.log.Warn("broker network listener refused a request without a live token",
			"source", src.String(), "kind", kind, "limit", fmt.Sprintf("%d per %v", SourceFailures, SourceWindow))
	}
	writeOutcome(w, refuse(refToken))
}

// sourceOf is the request's source address ("" parses to the zero Addr).
func sourceOf(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// sourceLimiter counts refusals per source address in fixed windows.
type sourceLimiter struct {
	mu      sync.Mutex
	windows map[netip.Addr]*sourceWindow
	swept   time.Time // the last sweep of a full table
}

type sourceWindow struct {
	start  time.Time
	fails  int
	logged bool
}

func newSourceLimiter() *sourceLimiter {
	return &sourceLimiter{windows: map[netip.Addr]*sourceWindow{}}
}

// window is src's current window, or nil when it has none.
func (l *sourceLimiter) window(src netip.Addr, now time.Time) *sourceWindow {
	w := l.windows[src]
	if w != nil && now.Sub(w.start) >= SourceWindow {
		delete(l.windows, src)
		return nil
	}
	return w
}

func (l *sourceLimiter) limited(src netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window(src, now)
	return w != nil && w.fails >= SourceFailures
}

// fail counts a refusal of src. A full table drops its ended windows,
// at most once a window (so a flood of new sources costs one sweep of
// maxSources entries a minute, not one per request), and counts nothing
// more while it stays full.
func (l *sourceLimiter) fail(src netip.Addr, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window(src, now)
	if w == nil {
		if len(l.windows) >= maxSources && now.Sub(l.swept) >= SourceWindow {
			l.swept = now
			for a, x := range l.windows {
				if now.Sub(x.start) >= SourceWindow {
					delete(l.windows, a)
				}
			}
		}
		if len(l.windows) >= maxSources {
			return
		}
		w = &sourceWindow{start: now}
		l.windows[src] = w
	}
	w.fails++
}

// firstLog reports whether src's window has not logged yet, and marks it.
func (l *sourceLimiter) firstLog(src netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window(src, now)
	if w == nil || w.logged {
		return false // logged in this window, or an uncounted source: never a flood
	}
	w.logged = true
	return true
}
