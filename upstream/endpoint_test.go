package upstream_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/upstream/endpointtest"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range endpointtest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			e, err := upstream.ParseEndpoint(tc.Raw, tc.AllowHTTP)
			if tc.Want == nil {
				if err != nil || e.String() != tc.Raw || e.IsZero() {
					t.Fatalf("upstream.ParseEndpoint(%q) = %q, %v; want it accepted as written", tc.Raw, e, err)
				}
				return
			}
			if !errors.Is(err, tc.Want) || !errors.Is(err, upstream.ErrEndpoint) || !errors.Is(err, rtsandbox.ErrInvalid) || !e.IsZero() {
				t.Fatalf("upstream.ParseEndpoint(%q) = %q, %v; want %v", tc.Raw, e, err, tc.Want)
			}
			if strings.Contains(err.Error(), "api.example") {
				t.Errorf("error %q repeats the URL", err)
			}
		})
	}
}

func TestEndpointCasesCoverEveryRule(t *testing.T) {
	seen := map[error]bool{}
	for _, tc := range endpointtest.Cases() {
		seen[tc.Want] = true
	}
	for _, rule := range []error{nil, upstream.ErrEndpointSyntax, upstream.ErrEndpointScheme, upstream.ErrEndpointUserinfo, upstream.ErrEndpointFragment, upstream.ErrEndpointHost} {
		if !seen[rule] {
			t.Errorf("no case for %v", rule)
		}
	}
}

func TestMustParseEndpointPanics(t *testing.T) {
	defer func() {
		if v := recover(); !errors.Is(v.(error), upstream.ErrEndpointUserinfo) {
			t.Errorf("upstream.MustParseEndpoint(userinfo) panicked with %v", v)
		}
	}()
	upstream.MustParseEndpoint("https://u:p@api.example/", false)
}

func TestEndpointWithQuery(t *testing.T) {
	e := upstream.MustParseEndpoint("https://s.example/search?lang=en&q=old", false)
	got := e.WithQuery(url.Values{"q": {"a b&c"}, "format": {"json"}})
	if want := "https://s.example/search?format=json&lang=en&q=a+b%26c"; got.String() != want {
		t.Errorf("WithQuery = %q; want %q", got, want)
	}
	if _, err := upstream.ParseEndpoint(got.String(), false); err != nil {
		t.Errorf("WithQuery result breaks the rule: %v", err)
	}
	if !e.Equal(upstream.MustParseEndpoint("https://s.example/search?lang=en&q=old", false)) || e.Equal(got) {
		t.Error("Equal compares the URL")
	}
}
