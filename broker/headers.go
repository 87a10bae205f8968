package broker

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox/wire"
)

// allowedHeaders is every request header a worker may send. Anything else
// is refused, so a guest cannot smuggle routing, proxy or credential
// headers past the broker.
var allowedHeaders = map[string]bool{
	"host":            true, // must be "broker" (checked below)
	"content-type":    true,
	"content-length":  true,
	"accept":          true,
	"accept-encoding": true, // harmless: responses are never compressed
	"authorization":   true, // must be the dummy bearer (checked below)
	"user-agent":      true, // never forwarded
}

// deniedHeaders are refused even if a future edit added them to the
// allow-list: hop-by-hop headers, alternative credentials and forwarding
// headers that upstreams trust.
var deniedHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-authenticate": true, "proxy-authorization": true,
	"te": true, "trailer": true, "transfer-encoding": true, "upgrade": true, "x-api-key": true,
	"cookie": true, "forwarded": true, "x-forwarded-host": true, "x-forwarded-for": true,
	"x-forwarded-proto": true,
}

const dummyBearer = "Bearer " + wire.DummyKey

// checkHeaders applies steps 3–5 of the pipeline. net/http moves some
// headers out of r.Header: Host into r.Host, Transfer-Encoding into
// r.TransferEncoding and declared trailers into r.Trailer, so those are
// checked there too.
//
// On the Anthropic routes and wire.RouteOpenAIChat (lenient) the
// session spec's rule holds instead of the allow-list (docs/protocol.md, "Model calls"):
// headers outside both lists are accepted and never forwarded, since
// official clients send their own (x-stainless-*, openai-*,
// anthropic-version, anthropic-beta); the deny-list still refuses, except
// an x-api-key holding exactly the dummy key, the way the Anthropic
// clients present a key. Forwarded are only anthropic-version and
// anthropic-beta on the Anthropic routes (anthropicHeaders).
func checkHeaders(r *http.Request, lenient bool) (refusal, bool) {
	// HTTP/1.0 is refused outright: for it net/http silently deletes a
	// Transfer-Encoding header instead of exposing it, so the deny-list
	// could not see one. The worker speaks HTTP/1.1.
	if !r.ProtoAtLeast(1, 1) || len(r.TransferEncoding) > 0 || r.Trailer != nil {
		return refHeader, false
	}
	for name, vals := range r.Header {
		lower := strings.ToLower(name)
		switch {
		case lenient && lower == "x-api-key":
			if !dummy(vals, wire.DummyKey) {
				return refCredential, false
			}
		case deniedHeaders[lower], !lenient && !allowedHeaders[lower]:
			return refHeader, false
		}
	}
	if vals, ok := r.Header["Authorization"]; ok && !dummy(vals, dummyBearer) {
		return refCredential, false
	}
	// HTTP/1.1 requires a Host header (net/http answers 400 without one),
	// so an empty r.Host here is a Host header sent empty: not "broker".
	if r.Host != wire.BrokerHost {
		return refHost, false
	}
	return refusal{}, true
}

// dummy reports whether a header's values are exactly want, compared in
// constant time.
func dummy(vals []string, want string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.Join(vals, ", ")), []byte(want)) == 1
}
