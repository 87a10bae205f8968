package broker_test

// The configured limits of a session broker (config's session.max_in_flight,
// max_connections, max_request_mb, max_response_mb): each is enforced at
// the value given, and 0 keeps the spec's default.

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// NewSession refuses limits outside their ranges and takes 0 for the
// spec's defaults.
func TestSessionConfigLimitRanges(t *testing.T) {
	tests := []struct {
		name string
		set  func(*broker.SessionConfig)
		ok   bool
	}{
		{"defaults", func(*broker.SessionConfig) {}, true},
		{"two connections, default slots lowered to one", func(c *broker.SessionConfig) { c.MaxConnections = 2 }, true},
		{"widest", func(c *broker.SessionConfig) {
			c.MaxConnections, c.MaxInFlight = broker.MaxSessionConns, broker.MaxSessionConns-1
			c.MaxRequestBytes, c.MaxResponseBytes = rtsandbox.MaxSessionRequest, rtsandbox.MaxStreamedAnswer
		}, true},
		{"narrowest", func(c *broker.SessionConfig) {
			c.MaxConnections, c.MaxInFlight, c.MaxRequestBytes, c.MaxResponseBytes = 2, 1, 1, 1
		}, true},
		{"one connection", func(c *broker.SessionConfig) { c.MaxConnections = 1 }, false},
		{"too many connections", func(c *broker.SessionConfig) { c.MaxConnections = broker.MaxSessionConns + 1 }, false},
		{"negative connections", func(c *broker.SessionConfig) { c.MaxConnections = -1 }, false},
		{"slots leave no long poll", func(c *broker.SessionConfig) { c.MaxConnections, c.MaxInFlight = 4, 4 }, false},
		{"negative slots", func(c *broker.SessionConfig) { c.MaxInFlight = -1 }, false},
		{"request over the protocol limit", func(c *broker.SessionConfig) { c.MaxRequestBytes = rtsandbox.MaxSessionRequest + 1 }, false},
		{"negative request limit", func(c *broker.SessionConfig) { c.MaxRequestBytes = -1 }, false},
		{"answer over 50 MiB", func(c *broker.SessionConfig) { c.MaxResponseBytes = rtsandbox.MaxStreamedAnswer + 1 }, false},
		{"negative answer cap", func(c *broker.SessionConfig) { c.MaxResponseBytes = -1 }, false},
	}
	b := plainBroker(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := broker.SessionConfig{Broker: b}
			tt.set(&cfg)
			s, err := broker.NewSession(cfg)
			if got := err == nil; got != tt.ok {
				t.Fatalf("NewSession = %v; want ok %v", err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Errorf("error %v does not match ErrInvalid", err)
				}
				return
			}
			s.Close()
		})
	}
}

// session.max_in_flight 2: two calls whose answers are still streaming
// hold both slots; the third concurrent call gets 429 "Broker budget
// exhausted", and one more fits once they end.
func TestSessionConfiguredMaxInFlight(t *testing.T) {
	const slots = 2
	arrived := make(chan struct{}, 4)
	unblock := make(chan struct{})
	f := newSession(t, sessOptions{
		session: func(c *broker.SessionConfig) { c.MaxInFlight = slots },
		reply:   heldReply(arrived, unblock),
	})
	f.bind("")
	assertSlots(t, f, slots, arrived, unblock)
}

// A max_in_flight below the spec's 4 narrows the startup window too: with
// one slot, an MCP call of the window whose answer is still streaming
// leaves none for a second.
func TestSessionConfiguredMaxInFlightStartupWindow(t *testing.T) {
	arrived := make(chan struct{}, 2)
	unblock := make(chan struct{})
	f := newSession(t, sessOptions{
		session: func(c *broker.SessionConfig) { c.MaxInFlight = 1 },
		reply:   heldReply(arrived, unblock),
	})
	first := make(chan resp, 1)
	go func() { first <- f.post("/mcp/research", rpcBody("ping", "")) }()
	<-arrived
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 429, "Broker budget exhausted")
	close(unblock)
	wantResp(t, <-first, 200, `{"a":1}`)
}

// session.max_connections 4: of 10 connections, exactly 6 are closed at
// once.
func TestSessionConfiguredMaxConnections(t *testing.T) {
	const limit, dialled = 4, 10
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.MaxConnections, c.MaxInFlight = limit, 2 }})
	if closed := closedAtOnce(t, f.path, dialled); closed != dialled-limit {
		t.Errorf("%d of %d connections closed; want %d", closed, dialled, dialled-limit)
	}
}

// session.max_request_mb 1: a credential call's body of exactly 1 MiB is
// served, one byte more is the spec's 502 "Broker call failed" before the
// tool runs.
func TestSessionConfiguredMaxRequest(t *testing.T) {
	const limit = 1 << 20
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.MaxRequestBytes = limit }})
	f.bind("")
	body := func(n int64) io.Reader {
		const call = `{"input":{}}`
		return &patternReader{n: n - int64(len(call)), b: ' ', tail: call}
	}
	wantResp(t, f.postReader("/tools/lookup", body(limit), limit), 200, "")
	wantResp(t, f.postReader("/tools/lookup", body(limit+1), limit+1), 502, "Broker call failed")
	f.mu.Lock()
	calls := len(f.toolCalls)
	f.mu.Unlock()
	if calls != 1 {
		t.Errorf("tool ran %d times; want once (the body at the limit)", calls)
	}
}

// session.max_response_mb 1: an upstream answer of exactly 1 MiB is passed
// on, one byte more is cut: a streamed one after its head (the worker's
// read fails), a whole one refused as "Broker call failed".
func TestSessionConfiguredMaxResponse(t *testing.T) {
	const limit = 1 << 20
	tests := []struct {
		name     string
		size     int
		stream   bool
		wantCut  bool
		wantCode int
	}{
		{"streamed at the cap", limit, true, false, 200},
		{"streamed over the cap", limit + 1, true, true, 200},
		{"whole at the cap", limit, false, false, 200},
		{"whole over the cap", limit + 1, false, false, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A streamed answer is events: two of them, the second
			// passing the cap, so the head is out when it comes.
			answer, ct := `{"a":"`+strings.Repeat("a", tt.size-8)+`"}`, "application/json"
			if tt.stream {
				first := "data: {}\n\n"
				answer, ct = first+"data: "+strings.Repeat("a", tt.size-len(first)-8)+"\n\n", "text/event-stream"
			}
			f := newSession(t, sessOptions{
				session: func(c *broker.SessionConfig) { c.MaxResponseBytes = limit },
				reply: func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", ct)
					io.WriteString(w, answer)
				},
			})
			f.bind("")
			req := `{"messages":` + userHi + `}`
			if tt.stream {
				req = `{"stream":true,"messages":` + userHi + `}`
			}
			r := f.post(wire.RouteAnthropicMessages, req)
			got := struct {
				Status   int
				Cut      bool
				Complete bool
			}{r.Status, r.Err != nil, r.Err == nil && r.Body == answer}
			want := struct {
				Status   int
				Cut      bool
				Complete bool
			}{tt.wantCode, tt.wantCut, tt.wantCode == 200 && !tt.wantCut}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answer of %d bytes (-want +got):\n%s", tt.size, diff)
			}
			if tt.wantCode == 502 && r.Body != "Broker call failed" {
				t.Errorf("body = %q; want Broker call failed", r.Body)
			}
		})
	}
}
