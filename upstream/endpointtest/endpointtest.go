// Package endpointtest holds the endpoint rule's table for tests.
package endpointtest

import (
	"errors"
	"testing"

	"github.com/rtsandbox/rtsandbox/upstream"
)

// Case is one row of the endpoint rule's table: a raw URL, the
// allow_http setting, and the rule it breaks (nil when accepted).
type Case struct {
	Name      string
	Raw       string
	AllowHTTP bool
	Want      error
}

// Cases returns the endpoint rule as a table, each refusal named by the
// rule it breaks. upstream tests ParseEndpoint against it; config, broker,
// search and research tests check with it that what reaches them refuses
// exactly what the one rule refuses.
func Cases() []Case {
	return []Case{
		{"AcceptsHTTPS", "https://api.example/v1/chat/completions", false, nil},
		{"AcceptsHTTPSWithPort", "https://api.example:8443/v1", false, nil},
		{"AcceptsQuery", "https://api.example/v1?api-version=2024-06-01", false, nil},
		{"AcceptsHTTPWithAllowHTTP", "http://127.0.0.1:8080/v1", true, nil},
		{"AcceptsHTTPSWithAllowHTTP", "https://api.example/v1", true, nil},
		{"AcceptsUppercaseScheme", "HTTPS://api.example/v1", false, nil},
		{"RefusesUnparsable", "https://x y/", false, upstream.ErrEndpointSyntax},
		{"RefusesNotAURL", "://bad", false, upstream.ErrEndpointSyntax},
		{"RefusesRelative", "/v1/chat", false, upstream.ErrEndpointScheme},
		{"RefusesEmpty", "", false, upstream.ErrEndpointScheme},
		{"RefusesHTTPWithoutAllowHTTP", "http://api.example/v1", false, upstream.ErrEndpointScheme},
		{"RefusesFTP", "ftp://api.example/", false, upstream.ErrEndpointScheme},
		{"RefusesFTPWithAllowHTTP", "ftp://api.example/", true, upstream.ErrEndpointScheme},
		{"RefusesUserinfo", "https://u:p@api.example/", false, upstream.ErrEndpointUserinfo},
		{"RefusesUserinfoUserOnly", "https://u@api.example/", false, upstream.ErrEndpointUserinfo},
		{"RefusesUserinfoEmpty", "https://@api.example/", false, upstream.ErrEndpointUserinfo},
		{"RefusesUserinfoWithAllowHTTP", "http://u:p@127.0.0.1/x", true, upstream.ErrEndpointUserinfo},
		{"RefusesFragment", "https://api.example/#x", false, upstream.ErrEndpointFragment},
		{"RefusesFragmentEmpty", "https://api.example/v1#", false, upstream.ErrEndpointFragment},
		{"RefusesHostMissing", "https:///v1", false, upstream.ErrEndpointHost},
		{"RefusesHostPortOnly", "https://:443/v1", false, upstream.ErrEndpointHost},
		{"RefusesHostOpaque", "https:api.example", false, upstream.ErrEndpointHost},
	}
}

// Run checks, for every case, that build refuses exactly what the rule
// refuses: build gets the Endpoint ParseEndpoint makes of the case (the
// zero Endpoint when the rule refuses it, the only thing a refused URL can
// become) and must return nil for an accepted case and an error matching
// refused otherwise.
func Run(t *testing.T, refused error, build func(upstream.Endpoint) error) {
	t.Helper()
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			e, err := upstream.ParseEndpoint(tc.Raw, tc.AllowHTTP)
			if !errors.Is(err, tc.Want) || (tc.Want == nil) != (err == nil) {
				t.Fatalf("ParseEndpoint(%q) = %v; want %v", tc.Raw, err, tc.Want)
			}
			err = build(e)
			if tc.Want == nil && err != nil || tc.Want != nil && !errors.Is(err, refused) {
				t.Errorf("%q: got %v; want refused (%v) exactly when the rule refuses (%v)", tc.Raw, err, refused, tc.Want)
			}
		})
	}
}
