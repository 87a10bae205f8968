package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTokenRefusalsLoggedWithoutToken: every refused token is logged with
// its reason, method and path, and no record holds a token presented or
// configured; a guest token on an owner route is told the owner token is
// needed (403), not the 401 of a wrong token.
func TestTokenRefusalsLoggedWithoutToken(t *testing.T) {
	const sandbox = "/api/v1/channels/http:lobby/sandbox"
	tests := []struct {
		name, method, path, token string
		wantCode                  int
		wantBody, wantReason      string
	}{
		{"no-token", http.MethodGet, "/api/v1/events", "", 401, textUnauthorized, "no bearer token"},
		{"wrong-token", http.MethodGet, "/api/v1/events", "wrong-" + guestToken, 401, textUnauthorized, "a wrong bearer token"},
		{"guest-token-on-owner-route", http.MethodGet, sandbox, guestToken, 403, textOwnerToken, "the guest token on an owner route"},
		{"wrong-token-on-owner-route", http.MethodGet, sandbox, "wrong-" + ownerToken, 401, textUnauthorized, "a wrong bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			code, body := f.do(t, tt.method, tt.path, tt.token, "")
			if code != tt.wantCode || body != fmt.Sprintf(`{"error":%q}`+"\n", tt.wantBody) {
				t.Errorf("%s %s = %d %s; want %d %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
			recs := f.logs.records("refused a request")
			if len(recs) != 1 {
				t.Fatalf("refusal records = %d; want 1", len(recs))
			}
			got := map[string]string{"reason": recs[0]["reason"], "method": recs[0]["method"], "path": recs[0]["path"]}
			if diff := cmp.Diff(map[string]string{"reason": tt.wantReason, "method": tt.method, "path": tt.path}, got); diff != "" {
				t.Errorf("refusal record (-want +got):\n%s", diff)
			}
			for _, rec := range f.logs.records("refused a request") {
				for k, v := range rec {
					if strings.Contains(v, guestToken) || strings.Contains(v, ownerToken) {
						t.Errorf("refusal record %s = %q holds a token", k, v)
					}
				}
			}
		})
	}
}

// TestRefusalLogBounded: a flood of refusals logs refusalLines lines per
// window; the next line after the window counts the ones left out.
func TestRefusalLogBounded(t *testing.T) {
	var l refusalLimiter
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	logged := 0
	for range 3 * refusalLines {
		if _, ok := l.allow(t0.Add(time.Second)); ok {
			logged++
		}
	}
	if logged != refusalLines {
		t.Errorf("logged %d of %d refusals in one window; want %d", logged, 3*refusalLines, refusalLines)
	}
	n, ok := l.allow(t0.Add(time.Second + refusalWindow))
	if !ok || n != 2*refusalLines {
		t.Errorf("first refusal of the next window = %d, %v; want %d unlogged before it, logged", n, ok, 2*refusalLines)
	}
}
