package safefetch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Bounds and defaults (docs/web.md).
const (
	DefaultMaxBytes     = 5 << 20  // 5 MiB
	MaxMaxBytes         = 32 << 20 // 32 MiB
	DefaultTimeout      = 60 * time.Second
	MaxTimeout          = 120 * time.Second
	DefaultMaxRedirects = 5
	MaxMaxRedirects     = 10
	// ConnectTimeout bounds each address attempt: TCP connect plus, for
	// https, the TLS handshake. Its expiry is failover-eligible. Fixed.
	ConnectTimeout = 3 * time.Second
)

// Request header defaults (docs/web.md). The values are the reference's, kept for
// wire parity.
const (
	DefaultAccept    = "text/html,application/pdf,text/plain,application/json;q=0.9,*/*;q=0.1"
	DefaultUserAgent = "rtsandbox"
)

// Options bound one Fetch. The zero value is invalid (MaxBytes and Timeout
// are 0): start from DefaultOptions. Every field is validated before the URL
// is parsed; a violation is ErrInvalidBounds.
type Options struct {
	// MaxBytes bounds both the bytes read off the wire and the decoded
	// body: 1 … MaxMaxBytes.
	MaxBytes int64
	// Timeout bounds the whole fetch (DNS, every hop, connects, bodies):
	// 1ms … MaxTimeout.
	Timeout time.Duration
	// MaxRedirects is how many redirects are followed: 0 … MaxMaxRedirects.
	// With N, the (N+1)th redirect fails with ErrTooManyRedirects.
	MaxRedirects int
	// NoRedirects returns a redirect response (status, headers with
	// Location, empty body) instead of following it (follow_redirects:
	// false). The caller may pass the Location to Fetch again, which
	// re-admits, re-vets and re-pins it.
	NoRedirects bool
	// Header holds trusted host headers, sent on every hop, including
	// cross-origin redirect targets (reference behaviour). They override
	// the default Accept and User-Agent; Accept-Encoding is always
	// identity. Never put guest input here.
	Header http.Header
}

// DefaultOptions returns the reference defaults: 5 MiB, 60 s, 5 redirects,
// redirects followed.
func DefaultOptions() Options {
	return Options{MaxBytes: DefaultMaxBytes, Timeout: DefaultTimeout, MaxRedirects: DefaultMaxRedirects}
}

func (o Options) validate() error {
	if o.MaxBytes < 1 || o.MaxBytes > MaxMaxBytes ||
		o.Timeout < time.Millisecond || o.Timeout > MaxTimeout ||
		o.MaxRedirects < 0 || o.MaxRedirects > MaxMaxRedirects {
		return ErrInvalidBounds
	}
	for k, vs := range o.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return ErrInvalidBounds
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return ErrInvalidBounds
			}
		}
	}
	return nil
}

// Resolver looks up every address of a host name, in resolver order.
// *net.Resolver satisfies it. It is a trusted seam.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Hop is one pinned request handed to a Transport.
type Hop struct {
	// URL is the admitted URL: its host is the original name (for Host,
	// SNI and certificate verification), never the address.
	URL *url.URL
	// Addr is the vetted address to connect to.
	Addr netip.Addr
	// MaxBytes bounds the wire and decoded body.
	MaxBytes int64
	// Header is the complete request header (defaults, trusted caller
	// headers, Accept-Encoding: identity).
	Header http.Header
}

// Transport performs one pinned GET. A connection-class failure (an error
// matching ECONNREFUSED, ECONNRESET, EHOSTUNREACH, ENETUNREACH or ETIMEDOUT
// under errors.Is) lets Fetch try the next vetted address; any other error
// ends the fetch. It is a trusted seam; *Pinned is the production one.
type Transport interface {
	RoundTrip(ctx context.Context, hop Hop) (*Result, error)
}

// TransportFunc adapts a function to Transport.
type TransportFunc func(ctx context.Context, hop Hop) (*Result, error)

// RoundTrip calls f.
func (f TransportFunc) RoundTrip(ctx context.Context, hop Hop) (*Result, error) { return f(ctx, hop) }

// Result is a fetched response.
type Result struct {
	// URL is the final hop's normalised URL (no fragment).
	URL string
	// Status is the status code; StatusText the server's reason phrase.
	Status     int
	StatusText string
	// Header is the response header; repeated fields are joined with ", ".
	// Content-Encoding is removed; Content-Length too when a decoder ran.
	Header http.Header
	// Body is the decoded body, at most MaxBytes; empty for a redirect.
	Body []byte
}

// Fetcher fetches public URLs. The zero value uses the system resolver and
// the production Pinned transport.
type Fetcher struct {
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// Transport connects to a vetted address; nil means &Pinned{}.
	Transport Transport
}

// Fetch fetches rawURL with the default Fetcher.
func Fetch(ctx context.Context, rawURL string, opts Options) (*Result, error) {
	return (&Fetcher{}).Fetch(ctx, rawURL, opts)
}

// Fetch GETs rawURL and follows redirects within opts, re-admitting and
// re-vetting every hop, and connecting only to vetted addresses.
//
// Errors: the policy classes (ErrInvalidBounds, ErrInvalidURL, ErrScheme,
// ErrNonPublic, ErrUnreachable, *ResponseTooLargeError, ErrEncoding,
// ErrWireTooLarge, ErrBodyTooLarge, ErrTooManyRedirects, ErrNoLocation; all
// match ErrUnsafe); the resolver's error unchanged; ErrTimeout or the cause
// of ctx; network, TLS, HTTP and decoder errors from the transport.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, opts Options) (*Result, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t, err := admit(rawURL, nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, ErrTimeout)
	defer cancel()
	header := requestHeader(opts.Header)
	for hop := 0; ; hop++ {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		addrs, err := f.vet(ctx, t)
		if err != nil {
			return nil, err
		}
		res, err := f.try(ctx, t, addrs, opts.MaxBytes, header)
		if err != nil {
			return nil, err
		}
		if int64(len(res.Body)) > opts.MaxBytes {
			return nil, ErrBodyTooLarge
		}
		res.URL = t.href()
		if opts.NoRedirects || !isRedirect(res.Status) {
			return res, nil
		}
		if hop >= opts.MaxRedirects {
			return nil, ErrTooManyRedirects
		}
		loc := res.Header.Get("Location")
		if loc == "" {
			return nil, ErrNoLocation
		}
		if t, err = admit(loc, t); err != nil {
			return nil, err
		}
	}
}

// AssertPublicURL admits rawURL (docs/web.md) and vets its host (docs/web.md) without
// connecting, and returns the URL without its fragment. It does not pin: a
// later fetch by someone else may resolve differently, so use it only to
// hand a URL to a fetcher that cannot use Fetch. ctx bounds resolution.
func (f *Fetcher) AssertPublicURL(ctx context.Context, rawURL string) (*url.URL, error) {
	t, err := admit(rawURL, nil)
	if err != nil {
		return nil, err
	}
	if _, err := f.vet(ctx, t); err != nil {
		return nil, err
	}
	return t.u, nil
}

// AssertPublicURL is Fetcher.AssertPublicURL with the system resolver.
func AssertPublicURL(ctx context.Context, rawURL string) (*url.URL, error) {
	return (&Fetcher{}).AssertPublicURL(ctx, rawURL)
}

// vet returns the hop's addresses: the literal itself, or every answer of
// one lookup. Any refused answer refuses the whole name (a mixed answer is
// not trimmed to its public part).
func (f *Fetcher) vet(ctx context.Context, t *target) ([]netip.Addr, error) {
	if a, ok := t.literal(); ok {
		if !IsPublicAddr(a) {
			return nil, ErrNonPublic
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	var r Resolver = net.DefaultResolver
	if f.Resolver != nil {
		r = f.Resolver
	}
	host := t.hostname()
	addrs, err := race(ctx, func() ([]netip.Addr, error) { return r.LookupNetIP(ctx, "ip", host) })
	if err != nil {
		return nil, err // resolver errors propagate unchanged
	}
	if len(addrs) == 0 {
		return nil, ErrNonPublic
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		if !IsPublicAddr(a) {
			return nil, ErrNonPublic
		}
		out[i] = a.Unmap() // the system resolver returns IPv4 as ::ffff:a.b.c.d
	}
	return out, nil
}

// try connects to the vetted addresses in order, failing over only on
// connection-class errors and never re-resolving.
func (f *Fetcher) try(ctx context.Context, t *target, addrs []netip.Addr, maxBytes int64, header http.Header) (*Result, error) {
	var tr Transport = &Pinned{}
	if f.Transport != nil {
		tr = f.Transport
	}
	var last error
	for _, a := range addrs {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		hop := Hop{URL: cloneURL(t.u), Addr: a, MaxBytes: maxBytes, Header: header.Clone()}
		res, err := race(ctx, func() (*Result, error) { return tr.RoundTrip(ctx, hop) })
		if err == nil {
			if res == nil {
				res = &Result{}
			}
			if res.Header == nil {
				res.Header = http.Header{}
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !failoverEligible(err) {
			return nil, err
		}
		last = err
	}
	return nil, &unreachableError{last: last}
}

// unreachableError reads as ErrUnreachable (no addresses in the text) and
// also unwraps to the last connection error for the operator log.
type unreachableError struct{ last error }

func (e *unreachableError) Error() string   { return ErrUnreachable.Error() }
func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.last} }

// race runs fn and returns its result, or ctx's cause as soon as ctx ends,
// so that a seam that ignores ctx cannot outlive the deadline. The
// goroutine exits when fn returns; its result is then dropped.
func race[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type out struct {
		v   T
		err error
	}
	ch := make(chan out, 1)
	go func() {
		v, err := fn()
		ch <- out{v, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil && ctx.Err() != nil {
			return o.v, context.Cause(ctx)
		}
		return o.v, o.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// failoverEligible reports a connection-class error (docs/web.md).
func failoverEligible(err error) bool {
	for _, e := range [...]error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}

// requestHeader merges the defaults, the trusted caller headers and the
// forced Accept-Encoding: identity.
func requestHeader(caller http.Header) http.Header {
	h := http.Header{}
	h.Set("Accept", DefaultAccept)
	h.Set("User-Agent", DefaultUserAgent)
	for k, vs := range caller {
		h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	h.Set("Accept-Encoding", "identity")
	return h
}

func cloneURL(u *url.URL) *url.URL {
	c := *u
	return &c
}
