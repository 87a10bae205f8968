// Package fakemodel is a scripted stand-in for a model API, served on
// loopback, for tests, benchmarks and the demo: OpenAI-compatible chat
// completions and Anthropic Messages, each streamed or not. It never calls
// a real model.
//
// The contract:
//
//   - The server listens on 127.0.0.1 on a free port, or on Options.Addr,
//     which must be a loopback address (Listen refuses any other: this is
//     a test double and must never face a network). It answers POST on
//     any path, or with Options.Path set on that path only (404
//     elsewhere); the path is recorded, so callers point the broker's
//     model URL at URL()+"/v1/chat/completions" (ChatURL) or any other.
//   - Each request consumes the next Step of the script; the Step decides
//     the reply from the decoded request. When the script is exhausted the
//     server answers 500, unless Options.Loop repeats the last step.
//   - With Options.Key set, a request whose Authorization header is not
//     exactly "Bearer <Key>" (for Anthropic Messages: nor its x-api-key
//     exactly <Key>) gets 401 and consumes no step.
//   - Every request is recorded, in arrival order, before it is answered,
//     including refused ones (Requests), unless Options.NoRecord is set
//     for a long-running stand-in whose memory must not grow.
//   - The path picks the dialect (API): one ending in /messages is
//     Anthropic Messages, one ending in /messages/count_tokens its token
//     count, anything else chat completions. Steps are dialect-free: a
//     Messages body is read into the same chat view (Request.Body), and a
//     step's Response is written in the request's dialect.
//   - Chat-completions replies use the real wire shape: {"choices":[{
//     "message":{"role":"assistant","content":…,"tool_calls":[{"id",
//     "type":"function","function":{"name","arguments"}}]}}]}, where
//     arguments is a JSON string. Messages replies are {"id","type":
//     "message","role":"assistant","model","content":[text and tool_use
//     blocks],"stop_reason":"end_turn"|"tool_use","stop_sequence":null,
//     "usage"}; a tool call's arguments must then be a JSON object (else
//     500). count_tokens answers {"input_tokens": ⌈body bytes/4⌉} and
//     consumes no step. Output is deterministic: ids and timestamps derive
//     from the request count, never from the clock or randomness.
//   - With stream:true a 200 answer is streamed as server-sent events, in
//     deltas of Options.StreamChunk runes: chat.completion.chunk data
//     lines ending in "data: [DONE]" (plus a usage chunk when
//     stream_options.include_usage is set), or the Messages events
//     message_start, ping, content_block_start/delta/stop, message_delta
//     and message_stop. Response.StreamError cuts a stream with an error
//     event; error statuses and Raw bodies are never streamed.
//     Response.Chunks sends a hand-made body in flushed pieces instead,
//     with Options.StreamDelay after each, at any status.
//   - Image parts are recorded in either dialect (Message.Images,
//     Request.Images): a chat message's image_url parts (data URLs read
//     into type and data), a Messages user message's image blocks and a
//     tool_result's image blocks (on its tool message), so tests can
//     assert that an image reached the model as an image part. Text reads
//     a chat message's text parts too. A body may be as large as a
//     session request (rtsandbox.MaxSessionRequest).
//   - Errors use the dialect's error shape.
//   - StandInModel is the operator's scripted stand-in (`rtsandbox
//     standin-model`) and MemoryDemo the demo's: stateless steps that
//     read only the request, call only tools the request offers, and
//     speak to the sealed and the session worker alike (memory under
//     either tool name, image parts described, write_file).
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
	"net/netip"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// maxBody bounds a request body: a session turn's request carries up to
// 64 MiB of images as base64 (rtsandbox.MaxSessionRequest).
const maxBody = rtsandbox.MaxSessionRequest

// Options configure a Server beyond its script.
type Options struct {
	// Key, when not empty, is the bearer token every request must carry.
	Key string
	// Loop repeats the last step once the script is exhausted, for
	// long-running demos and benchmarks.
	Loop bool
	// Addr is the loopback host:port to listen on; empty means
	// 127.0.0.1 on a free port.
	Addr string
	// Path, when not empty, is the only path served; others get 404.
	Path string
	// NoRecord keeps no requests (Requests returns none), so a stand-in
	// that runs for hours holds no growing history.
	NoRecord bool
	// StreamChunk is how many runes of text or tool arguments one
	// streamed delta carries; 0 means 4.
	StreamChunk int
	// StreamDelay is a pause after each streamed event, for tests of
	// progress and of silence limits.
	StreamDelay time.Duration
}

// ErrNotLoopback refuses a listen address that is not a loopback address.
var ErrNotLoopback = errors.New("fakemodel: listen address must be a loopback address (127.0.0.0/8, ::1 or localhost)")

// Server is a running stand-in. Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	listener net.Listener
	http     *http.Server
	done     chan struct{}

	mu       sync.Mutex
	script   []Step
	next     int
	count    int // requests received, recorded or not
	requests []Request
}

// New starts a server that plays script in order, with no key and no loop.
// It panics if it cannot listen on loopback, as httptest.NewServer does.
func New(script ...Step) *Server { return NewWithOptions(Options{}, script...) }

// NewWithOptions starts a server that plays script under opts. It panics
// where Listen returns an error.
func NewWithOptions(opts Options, script ...Step) *Server {
	s, err := Listen(opts, script...)
	if err != nil {
		panic(err.Error())
	}
	return s
}

// Listen starts a server that plays script under opts, or returns why it
// cannot listen: ErrNotLoopback, or the listener's error.
func Listen(opts Options, script ...Step) (*Server, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if !LoopbackAddr(addr) {
		return nil, fmt.Errorf("%w: %q", ErrNotLoopback, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakemodel: listen on loopback: %w", err)
	}
	s := &Server{opts: opts, listener: ln, script: script, done: make(chan struct{})}
	s.http = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.http.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// LoopbackAddr reports whether addr is host:port with host a loopback IP
// literal or "localhost". Names other than localhost are refused: what
// they resolve to is not this package's to trust.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
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
		writeError(w, req.API, status, http.StatusText(status))
	case req.API == AnthropicCountTokens:
		countTokens(w, req)
	case !ok:
		writeError(w, req.API, http.StatusInternalServerError, "fakemodel: script exhausted")
	case step.respond == nil:
		writeError(w, req.API, http.StatusInternalServerError, "fakemodel: zero Step in script")
	default:
		s.writeResponse(w, r, req, step.respond(req))
	}
}

// decode reads and checks the request; status is non-zero when it is
// refused before reaching the script.
func (s *Server) decode(r *http.Request) (Request, int) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	req := Request{Method: r.Method, Path: r.URL.Path, API: apiOf(r.URL.Path), Header: r.Header.Clone(), Raw: raw}
	switch {
	case err != nil || len(raw) > maxBody:
		return req, http.StatusRequestEntityTooLarge
	case s.opts.Path != "" && r.URL.Path != s.opts.Path:
		return req, http.StatusNotFound
	case r.Method != http.MethodPost:
		return req, http.StatusMethodNotAllowed
	case s.opts.Key != "" && !keyMatches(req.API, r.Header, s.opts.Key):
		return req, http.StatusUnauthorized
	}
	if req.Body, err = decodeBody(req.API, raw); err != nil {
		req.DecodeErr = err
		return req, http.StatusBadRequest
	}
	return req, 0
}

// decodeBody reads a request body of dialect api into the chat view.
func decodeBody(api API, raw []byte) (ChatRequest, error) {
	if api != OpenAI {
		return decodeMessages(raw)
	}
	var body ChatRequest
	if err := json.Unmarshal(raw, &body); err != nil {
		return ChatRequest{}, err
	}
	for i, m := range body.Messages {
		body.Messages[i].Images = chatImages(m.Content)
	}
	return body, nil
}

// keyMatches checks the request's credential as the real API does: chat
// completions take "Authorization: Bearer <key>", Anthropic Messages
// "x-api-key: <key>" (a bearer key is accepted there too).
func keyMatches(api API, h http.Header, key string) bool {
	if api != OpenAI && subtle.ConstantTimeCompare([]byte(h.Get("X-Api-Key")), []byte(key)) == 1 {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(h.Get("Authorization")), []byte("Bearer "+key)) == 1
}

// record stores req and, unless it was refused, takes the next step.
func (s *Server) record(req *Request, status int) (Step, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Index = s.count
	s.count++
	if !s.opts.NoRecord {
		s.requests = append(s.requests, req.clone())
	}
	if status != 0 || req.API == AnthropicCountTokens {
		return Step{}, false // count_tokens is answered without a step
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
