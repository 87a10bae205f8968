// Package upstream makes the host's outgoing calls to operator-fixed
// endpoints (the model, MCP servers, webhook tools, search backends) and
// checks what comes back.
//
// The endpoint rule, in one place: an upstream URL is an Endpoint, made
// only by ParseEndpoint, which config calls once at load for every URL key
// (model.url, tools[].url, mcp[].url, web.search.url). An Endpoint is an
// absolute URL whose scheme is https (http only when the operator set
// allow_http, for loopback tests), with no user info, not even an empty
// one (the host adds the credential, the URL never carries one), no
// fragment, not even an empty "#", and a host name (a port alone is not
// one); a query is allowed. Every refusal wraps ErrEndpoint and names its
// rule (ErrEndpointSyntax, ErrEndpointScheme, ErrEndpointUserinfo,
// ErrEndpointFragment, ErrEndpointHost). Call.URL is an Endpoint, so
// nothing reaches the hardened client unchecked.
//
// The hardened client: every call (POST and GET) has headers built from
// scratch, no redirects (the target is never contacted), no environment
// proxy (so a proxy never sees the credential), no transparent
// decompression, a 2xx status and a bounded body. The caller bounds time
// through ctx. Open (stream.go) is the exception for answers passed on as
// they arrive: any status, the body unread, read through a StreamScanner.
//
// It is written on net/http because the rules are few and exact; no library
// enforces this particular set.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// MaxResponseBytes bounds an upstream response body (1 MiB).
const MaxResponseBytes = 1 << 20

// Failure classes. Each wraps rtsandbox.ErrUpstream. Their texts are
// content-free so they may go to the operator log.
var (
	ErrRedirect = fmt.Errorf("%w: redirect refused", rtsandbox.ErrUpstream)
	ErrStatus   = fmt.Errorf("%w: status not 2xx", rtsandbox.ErrUpstream)
	ErrTooLarge = fmt.Errorf("%w: response too large", rtsandbox.ErrUpstream)
	ErrNotJSON  = fmt.Errorf("%w: response not JSON", rtsandbox.ErrUpstream)
	ErrReflect  = fmt.Errorf("%w: response reflects the credential", rtsandbox.ErrUpstream)
	ErrNetwork  = fmt.Errorf("%w: network error", rtsandbox.ErrUpstream)
	ErrCanceled = fmt.Errorf("%w: call canceled or timed out", rtsandbox.ErrUpstream)
)

// Client posts JSON to fixed endpoints. The zero value is not usable; call
// New.
type Client struct {
	hc *http.Client
	// bufs holds read buffers of MaxResponseBytes+1 (see readBody).
	bufs sync.Pool
	// backoff is the wait before a retry without Retry-After (retry.go);
	// tests shorten it.
	backoff func(attempt int) time.Duration
}

// New returns a Client on transport, or on a dedicated hardened transport
// when transport is nil.
func New(transport http.RoundTripper) *Client {
	if transport == nil {
		transport = NewTransport()
	}
	c := &Client{hc: &http.Client{
		Transport: transport,
		// A redirect is a failure, and its target is never contacted.
		CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect },
	}, backoff: backoff}
	c.bufs.New = func() any {
		b := make([]byte, MaxResponseBytes+1)
		return &b
	}
	return c
}

// NewTransport returns the transport New uses by default: no proxy from the
// environment, no transparent gzip (the size limit then applies to the
// decoded body, since nothing is encoded), and bounded dial and TLS times.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       60 * time.Second,
		// Model answers run to a megabyte: 64 KiB buffers cut the read
		// syscalls per answer sixteenfold against the 4 KiB default.
		ReadBufferSize:  64 << 10,
		WriteBufferSize: 64 << 10,
	}
}

// Call is one upstream call. A POST sends exactly the headers content-type
// and accept application/json and, when Key is not empty, authorization
// Bearer Key (or KeyHeader: Key); a GET the same without content-type and
// without a body.
type Call struct {
	URL  Endpoint // the zero Endpoint fails the call with ErrNetwork
	Body []byte   // POST only
	Key  rtsandbox.Secret
	// KeyHeader names the header that carries Key as it is (such as
	// X-Subscription-Token); "" sends it as Authorization: Bearer Key.
	KeyHeader string
	// MaxBytes bounds the response body; 0 means MaxResponseBytes.
	MaxBytes int
	// Status is the one status accepted; 0 accepts any 2xx.
	Status int
	// Accept replaces application/json as the Accept header, such as
	// "application/json, text/event-stream" for a streamed call.
	Accept string
	// Header holds further headers the caller chose (their names are
	// never a guest's), such as anthropic-version. They cannot replace
	// the ones above.
	Header http.Header
	// Member names a top-level member of the answer that PostJSON finds
	// while it scans (Answer.Member); other calls ignore it.
	Member string
	// Idempotent marks a call that may be repeated after the upstream
	// failed in a way that may have come after it acted (a 500, a reset):
	// a model completion, not a webhook with side effects (retry.go).
	Idempotent bool
	// Forms, when made for Key (NewKeyForms), are the forms PostJSON
	// checks the answer for, made once by a caller that checks many
	// answers against the same key; otherwise they are made from Key.
	Forms *KeyForms
}

// keyForms returns call.Forms when they were made for call.Key, and the
// forms of call.Key otherwise.
func (call *Call) keyForms() *KeyForms {
	if call.Forms != nil && call.Forms.For(call.Key.Reveal()) {
		return call.Forms
	}
	return NewKeyForms(call.Key.Reveal())
}

// Post makes call and returns the response body of an accepted answer (any
// 2xx, or exactly call.Status), at most MaxResponseBytes long, retrying as
// retry.go describes. Errors wrap one of the failure classes and never
// contain the URL, headers or body.
func (c *Client) Post(ctx context.Context, call Call) ([]byte, error) {
	a, err := c.post(ctx, call, false)
	return a.Body, err
}

// PostJSON is Post for an answer that must be one JSON text that does not
// reflect call.Key: the answer is checked as CheckJSON checks it, while it
// is read, so the check ends soon after the answer's last byte instead of
// starting there. It also fails with ErrNotJSON or ErrReflect; a failure
// to read the whole answer takes precedence, as it would with Post then
// CheckJSON.
//
// The scan also finds the top-level member call.Member names, when set
// (Answer.Member), so that a caller needing one field of the answer need
// not decode all of it again.
func (c *Client) PostJSON(ctx context.Context, call Call) (Answer, error) {
	return c.post(ctx, call, true)
}

func (c *Client) post(ctx context.Context, call Call, check bool) (Answer, error) {
	for attempt := 1; ; attempt++ {
		a, status, h, err := c.do(ctx, http.MethodPost, call, check)
		if err == nil || attempt == MaxAttempts || !retryable(call.Idempotent, status, err) {
			return a, err
		}
		wait, ok := c.retryWait(attempt, h)
		if !ok || !sleep(ctx, wait) {
			return a, err
		}
	}
}

// Get makes call as a GET and returns the response body of an accepted
// answer, at most call.MaxBytes long, under the same rules and failure
// classes as Post. It makes one attempt: its callers (search) have short
// deadlines and a guest can simply ask again.
func (c *Client) Get(ctx context.Context, call Call) ([]byte, error) {
	a, _, _, err := c.do(ctx, http.MethodGet, call, false)
	return a.Body, err
}

// do makes one attempt. status is the answer's status (0 without one) and
// h its header, for the retry decision; a transport error keeps its cause
// under the content-free class. With check, the body is checked as it is
// read (PostJSON).
func (c *Client) do(ctx context.Context, method string, call Call, check bool) (a Answer, status int, h http.Header, err error) {
	a.Release = noRelease
	if call.URL.IsZero() {
		return a, 0, nil, fmt.Errorf("%w: no endpoint", ErrNetwork)
	}
	var rd io.Reader
	if method == http.MethodPost {
		rd = bytes.NewReader(call.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, call.URL.String(), rd)
	if err != nil {
		return a, 0, nil, fmt.Errorf("%w: cannot build request", ErrNetwork)
	}
	req.Header = header(method, call)
	resp, err := c.hc.Do(req)
	if err != nil {
		return a, 0, nil, classify(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 || (call.Status != 0 && resp.StatusCode != call.Status) {
		return a, resp.StatusCode, resp.Header, statusError(resp.StatusCode)
	}
	if check {
		a, err = c.readChecked(ctx, resp, call)
	} else {
		a.Body, err = c.readBody(ctx, resp, call.MaxBytes)
	}
	return a, resp.StatusCode, resp.Header, err
}

// header builds a call's headers from scratch.
func header(method string, call Call) http.Header {
	h := make(http.Header, len(call.Header)+4)
	for k, v := range call.Header {
		h[http.CanonicalHeaderKey(k)] = v
	}
	h.Set("Accept", "application/json")
	if call.Accept != "" {
		h.Set("Accept", call.Accept)
	}
	// An empty User-Agent stops net/http from adding its own.
	h["User-Agent"] = []string{""}
	if method == http.MethodPost {
		h.Set("Content-Type", "application/json")
	}
	switch {
	case call.Key == "":
	case call.KeyHeader != "":
		h.Set(call.KeyHeader, call.Key.Reveal())
	default:
		h.Set("Authorization", "Bearer "+call.Key.Reveal())
	}
	return h
}

// statusError classifies a refused status: a 3xx that net/http did not
// treat as a redirect (no Location) is still a redirect refused, never
// followed; anything else is ErrStatus.
func statusError(status int) error {
	if status >= 300 && status <= 399 {
		return &refusedStatus{class: ErrRedirect, code: status}
	}
	return &refusedStatus{class: ErrStatus, code: status}
}

// refusedStatus is a refused status, its number kept for Status; the text
// is the class and the number, content-free.
type refusedStatus struct {
	class error
	code  int
}

func (e *refusedStatus) Error() string { return fmt.Sprintf("%v (%d)", e.class, e.code) }
func (e *refusedStatus) Unwrap() error { return e.class }

// Status returns the HTTP status of an answer refused for it (ErrStatus,
// or ErrRedirect for a 3xx), when err carries one, so that a caller can
// say what the status means (doctor --online).
func Status(err error) (int, bool) {
	if e, ok := errors.AsType[*refusedStatus](err); ok {
		return e.code, true
	}
	return 0, false
}

// readBody reads at most limit bytes (MaxResponseBytes when limit < 1). A
// declared length over the limit fails before reading. A body under the
// default limit is read into a pooled buffer and copied out once, so a
// large answer costs no repeated growth and no zeroing of a fresh buffer.
func (c *Client) readBody(ctx context.Context, resp *http.Response, limit int) ([]byte, error) {
	if limit < 1 {
		limit = MaxResponseBytes
	}
	if resp.ContentLength > int64(limit) {
		return nil, ErrTooLarge
	}
	var buf []byte
	if limit == MaxResponseBytes {
		bufp := c.bufs.Get().(*[]byte)
		defer c.bufs.Put(bufp)
		buf = *bufp
	} else {
		buf = make([]byte, limit+1)
	}
	n, err := io.ReadFull(resp.Body, buf)
	switch {
	case err == nil:
		return nil, ErrTooLarge // the buffer holds limit+1
	case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		return nil, classify(ctx, err)
	case resp.ContentLength >= 0 && int64(n) != resp.ContentLength:
		return nil, ErrNetwork // the body ended before its declared length
	}
	return bytes.Clone(buf[:n]), nil
}

// classify maps a transport error to a content-free class: *url.Error
// texts carry the URL, which may itself be sensitive. A refused connection
// keeps its errno (content-free) for the retry decision.
func classify(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrRedirect):
		return ErrRedirect
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ErrCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: %w", ErrNetwork, syscall.ECONNREFUSED)
	default:
		return ErrNetwork
	}
}
