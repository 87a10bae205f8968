package safefetch

import (
	"context"
	"fmt"
	"net/http"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
)

// ErrUnsafe is the class of every policy refusal (the reference's
// UnsafeUrlError). It wraps rtsandbox.ErrRefused; every Err* below except
// ErrTimeout wraps it. Test with errors.Is, never by comparing text.
var ErrUnsafe = fmt.Errorf("%w: unsafe fetch", rtsandbox.ErrRefused)

// The refusal classes. Their texts are the reference's messages and carry no
// detail (no address, no host), so a caller may show them to a guest.
var (
	// ErrInvalidBounds: an option is out of range, or a header is malformed.
	ErrInvalidBounds error = &classError{"Invalid fetch bounds"}
	// ErrInvalidURL: the URL does not parse under WHATWG rules (or parses
	// there but not under net/url, which is refused to fail closed).
	ErrInvalidURL error = &classError{"Invalid URL"}
	// ErrScheme: the scheme is not http or https, or the URL carries a
	// non-empty username or password.
	ErrScheme error = &classError{"Only credential-free HTTP(S) URLs are allowed"}
	// ErrNonPublic: the host is, or resolves to, an address the policy
	// refuses; or the answer is empty; or the connected address is not the
	// vetted one.
	ErrNonPublic error = &classError{"URL resolves to a non-public address"}
	// ErrUnreachable: every vetted address failed with a connection-class
	// error (refused, reset, unreachable, connect deadline).
	ErrUnreachable error = &classError{"No vetted address could be reached"}
	// ErrTooLarge: the server declared a Content-Length above MaxBytes. The
	// returned error is a *ResponseTooLargeError that unwraps to this.
	ErrTooLarge error = &classError{"Response exceeds bounds"}
	// ErrEncoding: Content-Encoding is not exactly one of identity, gzip,
	// deflate or br.
	ErrEncoding error = &classError{"Response exceeds bounds or uses unsupported encoding"}
	// ErrWireTooLarge: more than MaxBytes came off the wire (body bytes, or
	// a response header above the fixed header bound).
	ErrWireTooLarge error = &classError{"Wire body too large"}
	// ErrBodyTooLarge: more than MaxBytes after decoding.
	ErrBodyTooLarge error = &classError{"Response body too large"}
	// ErrTooManyRedirects: a redirect arrived after MaxRedirects were followed.
	ErrTooManyRedirects error = &classError{"Too many redirects"}
	// ErrNoLocation: a redirect status without a Location.
	ErrNoLocation error = &classError{"Redirect without location"}
)

// ErrTimeout is the cause when Options.Timeout passes. It wraps
// context.DeadlineExceeded and is not a policy refusal. A caller's own
// cancellation surfaces as context.Cause of the caller's context.
var ErrTimeout = fmt.Errorf("fetch deadline exceeded: %w", context.DeadlineExceeded)

// errConnectDeadline is the per-address connect deadline (ConnectTimeout).
// It wraps ETIMEDOUT so that it is failover-eligible like the reference's.
var errConnectDeadline = fmt.Errorf("connection deadline exceeded: %w", syscall.ETIMEDOUT)

type classError struct{ msg string }

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return ErrUnsafe }

// ResponseTooLargeError is returned when the server declares a
// Content-Length above MaxBytes. It carries the status and the headers as
// received so a caller can report the size. It unwraps to ErrTooLarge.
type ResponseTooLargeError struct {
	Status int
	Header http.Header
}

func (e *ResponseTooLargeError) Error() string { return ErrTooLarge.Error() }
func (e *ResponseTooLargeError) Unwrap() error { return ErrTooLarge }
