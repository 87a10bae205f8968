package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// scripted answers each attempt with the next status (and headers); 0
// cuts the connection without an answer. Past the script it answers 200.
func scripted(t *testing.T, steps ...func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i < len(steps) {
			steps[i](w)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func status(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

// reset cuts the connection before any answer.
func reset(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

func fastClient() *Client {
	c := New(nil)
	c.backoff = func(int) time.Duration { return time.Millisecond }
	return c
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name       string
		steps      []func(http.ResponseWriter)
		idempotent bool
		wantErr    bool
		attempts   int32
	}{
		{"429-then-ok", []func(http.ResponseWriter){status(429, "Retry-After", "0")}, false, false, 2},
		{"503-twice-then-ok", []func(http.ResponseWriter){status(503), status(503)}, false, false, 3},
		{"429-three-times-gives-up", []func(http.ResponseWriter){status(429), status(429), status(429)}, false, true, 3},
		{"500-not-repeated-for-side-effects", []func(http.ResponseWriter){status(500)}, false, true, 1},
		{"500-repeated-when-idempotent", []func(http.ResponseWriter){status(500)}, true, false, 2},
		{"502-504-repeated-when-idempotent", []func(http.ResponseWriter){status(502), status(504)}, true, false, 3},
		{"reset-not-repeated-for-side-effects", []func(http.ResponseWriter){reset}, false, true, 1},
		{"reset-repeated-when-idempotent", []func(http.ResponseWriter){reset}, true, false, 2},
		{"400-never-repeated", []func(http.ResponseWriter){status(400)}, true, true, 1},
		{"401-never-repeated", []func(http.ResponseWriter){status(401)}, true, true, 1},
		{"retry-after-too-long-ends-the-call", []func(http.ResponseWriter){status(429, "Retry-After", "3600")}, true, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := scripted(t, tc.steps...)
			_, err := fastClient().Post(context.Background(), Call{URL: MustParseEndpoint(srv.URL, true), Idempotent: tc.idempotent})
			if (err != nil) != tc.wantErr || n.Load() != tc.attempts {
				t.Errorf("Post = %v after %d attempts; want error %v after %d", err, n.Load(), tc.wantErr, tc.attempts)
			}
		})
	}
}

// TestRetryAfterHonoured: the wait is the upstream's own Retry-After.
func TestRetryAfterHonoured(t *testing.T) {
	srv, n := scripted(t, status(429, "Retry-After-Ms", "300"))
	start := time.Now()
	if _, err := fastClient().Post(context.Background(), Call{URL: MustParseEndpoint(srv.URL, true)}); err != nil || n.Load() != 2 {
		t.Fatalf("Post = %v after %d attempts", err, n.Load())
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("retry came after %v; want the 300ms the upstream asked for", d)
	}
}

// TestRetryNeverPassesTheDeadline: a wait that would not leave the call's
// deadline room ends the call at once with the upstream's error.
func TestRetryNeverPassesTheDeadline(t *testing.T) {
	srv, n := scripted(t, status(503, "Retry-After", "2"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := fastClient().Post(ctx, Call{URL: MustParseEndpoint(srv.URL, true)})
	if !errors.Is(err, ErrStatus) || n.Load() != 1 {
		t.Errorf("Post = %v after %d attempts; want the 503 at once", err, n.Load())
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("returned after %v; want at once", d)
	}
}

// TestRefusedConnectionRetried: nothing reached a refused port, so even a
// call with side effects is tried again; the error stays content-free.
func TestRefusedConnectionRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var attempts atomic.Int32
	c := fastClient()
	c.hc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		attempts.Add(1)
		return NewTransport().RoundTrip(r)
	})
	_, err = c.Post(context.Background(), Call{URL: MustParseEndpoint("http://"+addr+"/x", true)})
	if !errors.Is(err, ErrNetwork) || attempts.Load() != MaxAttempts {
		t.Errorf("Post = %v after %d attempts; want ErrNetwork after %d", err, attempts.Load(), MaxAttempts)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{"date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{"past-date", http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0, true},
		{"milliseconds-first", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond, true},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"negative", http.Header{"Retry-After": {"-3"}}, 0, false},
		{"huge", http.Header{"Retry-After": {"99999999999"}}, 24 * time.Hour, true},
	}
	for _, tc := range tests {
		got, ok := retryAfter(tc.header, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: retryAfter = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	for attempt := 1; attempt <= 3; attempt++ {
		full := firstBackoff << (attempt - 1)
		for range 50 {
			if d := backoff(attempt); d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %v; want within [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
}
