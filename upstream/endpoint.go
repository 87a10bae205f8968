package upstream

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// ErrEndpoint is the class of every refusal of the endpoint rule; it wraps
// rtsandbox.ErrInvalid. Each rule has its own error wrapping it, so a
// caller (config) can name the rule that failed.
var ErrEndpoint = fmt.Errorf("%w: endpoints must be credential-free HTTPS URLs", rtsandbox.ErrInvalid)

// The endpoint rules, in the order ParseEndpoint checks them. Their texts
// are content-free: they never repeat the URL, which may hold a secret.
var (
	ErrEndpointSyntax   = fmt.Errorf("%w: not a valid URL", ErrEndpoint)
	ErrEndpointScheme   = fmt.Errorf("%w: must be an absolute https URL (http only with allow_http)", ErrEndpoint)
	ErrEndpointUserinfo = fmt.Errorf("%w: must not carry user info", ErrEndpoint)
	ErrEndpointFragment = fmt.Errorf("%w: must not carry a fragment", ErrEndpoint)
	ErrEndpointHost     = fmt.Errorf("%w: must name a host", ErrEndpoint)
)

// Endpoint is an operator-fixed upstream URL that passed the endpoint rule
// (see the package documentation). The only ways to make one are
// ParseEndpoint and MustParseEndpoint, so holding an Endpoint means the
// rule was checked; the zero value is "no endpoint" and every user of one
// refuses it.
type Endpoint struct {
	raw string
}

// ParseEndpoint applies the endpoint rule to raw: a URL whose scheme is
// https (or http when allowHTTP, for loopback tests), without
// user info (not even an empty one: the credential is added by the host,
// never carried by the URL), without a fragment (not even an empty "#"),
// and naming a host (a port alone is not one). A query is allowed: some
// providers version their API with one. The error wraps the one rule
// that failed first, and ErrEndpoint.
func ParseEndpoint(raw string, allowHTTP bool) (Endpoint, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return Endpoint{}, ErrEndpointSyntax
	case !(u.Scheme == "https" || allowHTTP && u.Scheme == "http"):
		return Endpoint{}, ErrEndpointScheme
	case u.User != nil:
		return Endpoint{}, ErrEndpointUserinfo
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return Endpoint{}, ErrEndpointFragment
	case u.Opaque != "" || u.Hostname() == "":
		return Endpoint{}, ErrEndpointHost
	}
	return Endpoint{raw: raw}, nil
}

// MustParseEndpoint is ParseEndpoint for fixed URLs (tests, the demo); it
// panics when raw breaks the rule.
func MustParseEndpoint(raw string, allowHTTP bool) Endpoint {
	e, err := ParseEndpoint(raw, allowHTTP)
	if err != nil {
		panic(err)
	}
	return e
}

// IsZero reports whether e is the zero value: no endpoint.
func (e Endpoint) IsZero() bool { return e.raw == "" }

// String returns the URL as configured. It may be internal and is
// operator data: keep it out of guest-visible texts.
func (e Endpoint) String() string { return e.raw }

// Equal reports whether e and o are the same URL (for go-cmp).
func (e Endpoint) Equal(o Endpoint) bool { return e.raw == o.raw }

// WithQuery returns e with the parameters of q set in its query, the
// parameters it already has kept unless q sets them. Adding a query
// cannot break the rule, so the result is an Endpoint too.
func (e Endpoint) WithQuery(q url.Values) Endpoint {
	u, err := url.Parse(e.raw)
	if err != nil { // cannot happen: e passed the rule
		return Endpoint{}
	}
	have := u.Query()
	for k, v := range q {
		have[k] = v
	}
	u.RawQuery = have.Encode()
	return Endpoint{raw: u.String()}
}

// Join returns e with path appended to its path (after dropping one
// trailing slash of e's) and its query replaced by rawQuery, such as the
// Anthropic base https://api.anthropic.com joined with /v1/messages and
// beta=true. The host chooses both parts; neither can break the rule.
func (e Endpoint) Join(path, rawQuery string) Endpoint {
	u, err := url.Parse(e.raw)
	if err != nil { // cannot happen: e passed the rule
		return Endpoint{}
	}
	u = u.JoinPath(path)
	u.RawQuery = rawQuery
	return Endpoint{raw: u.String()}
}
