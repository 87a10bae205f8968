package broker

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzTokenHeader: whatever a request carries in TokenHeader (one value or
// several), the gate answers the one refusal unless it is exactly the live
// token, and only then reaches the turn's handler, with the header gone.
func FuzzTokenHeader(f *testing.F) {
	tokens := NewTokens()
	var reached int
	var sawHeader bool
	tok, revoke := tokens.Issue(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		sawHeader = r.Header.Get(TokenHeader) != ""
		w.WriteHeader(http.StatusNoContent)
	}))
	defer revoke()
	for _, seed := range []string{"", tok.Reveal(), strings.Repeat("A", TokenLen), strings.Repeat("A", TokenLen+1),
		tok.Reveal()[:TokenLen-1] + "=", tok.Reveal() + "\x00", "Bearer " + tok.Reveal(), tok.Reveal() + "," + tok.Reveal()} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, value string, twice bool) {
		// A fresh limiter each time: the test is about the token, not
		// the source limit.
		g := &gate{tokens: tokens, sources: newSourceLimiter(), log: slog.New(slog.DiscardHandler), now: time.Now}
		r := httptest.NewRequest(http.MethodPost, "/model", nil)
		r.Header[TokenHeader] = []string{value}
		if twice {
			r.Header[TokenHeader] = append(r.Header[TokenHeader], value)
		}
		before := reached
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		live := value == tok.Reveal() && !twice
		switch {
		case live && (w.Code != http.StatusNoContent || reached != before+1 || sawHeader):
			t.Fatalf("the live token: %d, reached %v, header seen %v", w.Code, reached != before, sawHeader)
		case !live && (w.Code != http.StatusUnauthorized || w.Body.String() != refToken.text || reached != before):
			t.Fatalf("value %q (twice %v): %d %q, reached %v; want the refusal", value, twice, w.Code, w.Body.String(), reached != before)
		}
	})
}
