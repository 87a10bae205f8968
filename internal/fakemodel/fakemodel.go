// Package fakemodel is a scripted stand-in for an OpenAI-compatible
// chat-completions endpoint, served on loopback, for tests, benchmarks and
// the demo. It never calls a real model.
//
// The contract:
//
//   - The server listens on 127.0.0.1 on a free port and answers POST on
//     any path; the path is recorded, so callers point the broker's model
//     URL at URL()+"/v1/chat/completions" (ChatURL) or any other path.
//   - Each request consumes the next Step of the script; the Step decides
//     the reply from the decoded request. When the script is exhausted the
//     server answers 500, unless Options.Loop repeats the last step.
//   - With Options.Key set, a request whose Authorization header is not
//     exactly "Bearer <Key>" gets 401 and consumes no step.
//   - Every request is recorded, in arrival order, before it is answered,
//     including refused ones (Requests).
//   - Replies use the real wire shape: {"choices":[{"message":{"role":
//     "assistant","content":…,"tool_calls":[{"id","type":"function",
//     "function":{"name","arguments"}}]}}]}, where arguments is a JSON
//     string. Output is deterministic: ids and timestamps derive from the
//     request count, never from the clock or randomness.
//   - Streaming (stream:true) is not supported; such requests get 400.
package fakemodel

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxBody bounds a request body; the broker never sends more than a few
// hundred KiB.
const maxBody = 8 << 20

// Options configure a Server beyond its script.
type Options struct {
	// Key, when not empty, is the bearer token every request must carry.
	Key string
	// Loop repeats the last step once the script is exhausted, for
	// long-running demos and benchmarks.
	Loop bool
}

// Server is a running stand-in. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	listener net.Listener
	http     *http.Server
	done     chan struct{}

	mu       sync.Mutex
	script   []Step
	next     int
	requests []Request
}

// New starts a server that plays script in order, with no key and no loop.
// It panics if it cannot listen on loopback, as httptest.NewServer does.
func New(script ...Step) *Server { return NewWithOptions(Options{}, script...) }

// NewWithOptions starts a server that plays script under opts.
func NewWithOptions(opts Options, script ...Step) *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakemodel: listen on loopback: %v", err))
	}
	s := &Server{opts: opts, listener: ln, script: script, done: make(chan struct{})}
	s.http = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.http.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s
}

// URL is the base URL, such as http://127.0.0.1:41234, without a path.
func (s *Server) URL() string { return "http://" + s.listener.Addr().String() }

// ChatURL is URL with the usual chat-completions path.
func (s *Server) ChatURL() string { return s.URL() + "/v1/chat/completions" }

// Close stops the server, drops open connections and waits for the serve
// loop to end. It is safe to call more than once.
func (s *Server) Close() {
	_ = s.http.Close()
	<-s.done
}

// Shutdown stops the server gracefully, letting requests in flight finish
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		_ = s.http.Close()
	}
	<-s.done
	return err
}

// Requests returns copies of the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = r.clone()
	}
	return out
}

// Remaining is the number of script steps not played yet (0 in loop mode
// once the last step is reached).
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(len(s.script)-s.next, 0)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	req, status := s.decode(r)
	step, ok := s.record(&req, status)
	switch {
	case status != 0:
		writeError(w, status, http.StatusText(status))
	case !ok:
		writeError(w, http.StatusInternalServerError, "fakemodel: script exhausted")
	case step.respond == nil:
		writeError(w, http.StatusInternalServerError, "fakemodel: zero Step in script")
	default:
		writeResponse(w, req, step.respond(req))
	}
}

// decode reads and checks the request; status is non-zero when it is
// refused before reaching the script.
func (s *Server) decode(r *http.Request) (Request, int) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	switch {
	case err != nil || len(raw) > maxBody:
		return req, http.StatusRequestEntityTooLarge
	case r.Method != http.MethodPost:
		return req, http.StatusMethodNotAllowed
	case s.opts.Key != "" && !bearerMatches(r.Header.Get("Authorization"), s.opts.Key):
		return req, http.StatusUnauthorized
	}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		req.DecodeErr = err
		return req, http.StatusBadRequest
	}
	if req.Body.Stream {
		return req, http.StatusBadRequest
	}
	return req, 0
}

func bearerMatches(header, key string) bool {
	return subtle.ConstantTimeCompare([]byte(header), []byte("Bearer "+key)) == 1
}

// record stores req and, unless it was refused, takes the next step.
func (s *Server) record(req *Request, status int) (Step, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Index = len(s.requests)
	s.requests = append(s.requests, req.clone())
	if status != 0 {
		return Step{}, false
	}
	switch {
	case s.next < len(s.script):
		s.next++
		return s.script[s.next-1], true
	case s.opts.Loop && len(s.script) > 0:
		return s.script[len(s.script)-1], true
	}
	return Step{}, false
}
