package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// sessionBroker stands in for the session broker (docs/session.md, "Routes and statuses")
// on a real Unix socket, faithful where the worker can tell: the worker
// routes with their statuses (ready 400 on a bad handshake, next 408
// Retry after its wait and 429 for a second waiter, result 409 No
// matching turn without reading the body, 400 Invalid result, 200
// Accepted), URL hygiene (a query → 404), host tools ({"input": object}
// else 400 Invalid tool input), MCP (method allow-list → 403, the body
// rebuilt, the session headers forwarded both ways, the upstream's status
// and body passed through) and the model routes (an Anthropic body rebuilt
// by modelapi.NormalizeMessages, which fails the test on a refusal, and
// forwarded to a loopback stand-in model, streamed back as it arrives).
// Every request must carry Host: broker and the dummy bearer.
type sessionBroker struct {
	t      *testing.T
	sock   string
	model  *fakemodel.Server
	client *http.Client

	// Set before the worker starts.
	config    string // /worker/config body; "" answers 404
	discovery string // /mcp-tools body
	mcp       map[string]string
	tools     map[string]func(input json.RawMessage) string // answer JSON
	nextWait  time.Duration
	// retryAfter is the retry-after sent with an upstream 429 or 529, so
	// that the worker's retry does not wait for real.
	retryAfter string
	level      modelapi.ThinkingLevel
	// compactor answers POST /compaction/compact (docs/protocol.md, "Compaction"): a status and a
	// body; nil answers 404, as a broker without the routes does.
	compactor func(r *http.Request, body []byte) (int, string)

	mu          sync.Mutex
	routes      []string
	readyBodies []string
	modelBodies []string
	compacts    []string // bodies of /compaction/compact
	reports     []string // bodies of /compaction/report
	refuseReady int      // answer this many readies 503
	expireAt    int      // answer the expireAt-th MCP tools/call 404 (an expired session)
	mcpCalls    int
	waiting     bool
	pending     *pendingTurn
	queued      chan struct{}
}

type pendingTurn struct {
	body      []byte
	turnID    string
	delivered bool
	done      chan wire.SessionResult
}

func startSessionBroker(t *testing.T, model *fakemodel.Server) *sessionBroker {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	b := &sessionBroker{
		t: t, model: model, client: &http.Client{Transport: tr},
		config:    `{"modelApi":"anthropic","model":"claude-test","stream":true,"prompt":"Be brief.","timeZone":"UTC","tools":[],"mcp":[]}`,
		discovery: `{"servers":[]}`,
		mcp:       map[string]string{}, tools: map[string]func(json.RawMessage) string{},
		nextWait: 20 * time.Millisecond, level: modelapi.ThinkingLevel("xhigh"),
		queued: make(chan struct{}, 1),
	}
	b.sock = serveUnix(t, b)
	return b
}

func (b *sessionBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	route := r.Method + " " + r.URL.Path
	b.mu.Lock()
	b.routes = append(b.routes, route)
	b.mu.Unlock()
	if r.Host != wire.BrokerHost || r.Header.Get("Authorization") != "Bearer "+wire.DummyKey {
		b.t.Errorf("%s: host %q, authorization %q", route, r.Host, r.Header.Get("Authorization"))
	}
	if r.URL.RawQuery != "" || r.URL.Fragment != "" {
		text(w, http.StatusNotFound, "Not found")
		return
	}
	switch {
	case route == "GET "+wire.RouteMCPTools:
		jsonAnswer(w, b.discovery)
	case route == "GET "+wire.RouteWorkerConfig:
		if b.config == "" {
			text(w, http.StatusNotFound, "Not found")
			return
		}
		jsonAnswer(w, b.config)
	case route == "POST "+wire.RouteWorkerReady:
		b.ready(w, r)
	case route == "GET "+wire.RouteWorkerNext:
		b.next(w, r)
	case route == "POST "+wire.RouteWorkerResult:
		b.result(w, r)
	case route == "POST "+wire.RouteAnthropicMessages:
		b.messages(w, r)
	case route == "POST "+wire.RouteModel:
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.modelBodies = append(b.modelBodies, string(body))
		b.mu.Unlock()
		out, ok := rebuildChat(b.t, body)
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		b.forward(w, r, b.model.ChatURL(), out, nil)
	case route == "POST "+wire.RouteCompactionCompact:
		b.compact(w, r)
	case route == "POST "+wire.RouteCompactionReport:
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		b.mu.Lock()
		b.reports = append(b.reports, string(body))
		b.mu.Unlock()
		text(w, http.StatusOK, "Accepted")
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, wire.RouteToolPrefix):
		b.tool(w, r, strings.TrimPrefix(r.URL.Path, wire.RouteToolPrefix))
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, wire.RouteMCPPrefix):
		b.mcpCall(w, r, strings.TrimPrefix(r.URL.Path, wire.RouteMCPPrefix))
	default:
		text(w, http.StatusNotFound, "Not found")
	}
}

// compact records a /compaction/compact body and answers with the
// compactor.
func (b *sessionBroker) compact(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.compacts = append(b.compacts, string(body))
	compactor := b.compactor
	b.mu.Unlock()
	if compactor == nil {
		text(w, http.StatusNotFound, "Not found")
		return
	}
	status, answer := compactor(r, body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, answer)
}

func text(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func jsonAnswer(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, body)
}

func (b *sessionBroker) ready(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, rtsandbox.MaxReadyBody+1))
	b.mu.Lock()
	b.readyBodies = append(b.readyBodies, string(body))
	refuse := b.refuseReady > 0
	if refuse {
		b.refuseReady--
	}
	b.mu.Unlock()
	if refuse {
		text(w, http.StatusServiceUnavailable, "down")
		return
	}
	if _, perr := wire.ParseWorkerReady(body); err != nil || perr != nil || len(body) > rtsandbox.MaxReadyBody {
		text(w, http.StatusBadRequest, "Invalid ready handshake")
		return
	}
	text(w, http.StatusOK, "Ready")
}

// next delivers the pending turn, or waits nextWait for one (docs/protocol.md, "The session protocol").
func (b *sessionBroker) next(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	if b.waiting {
		b.mu.Unlock()
		text(w, http.StatusTooManyRequests, "Already waiting")
		return
	}
	b.waiting = true
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.waiting = false; b.mu.Unlock() }()
	timer := time.NewTimer(b.nextWait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if p := b.pending; p != nil && !p.delivered {
			p.delivered = true
			b.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write(p.body)
			return
		}
		b.mu.Unlock()
		select {
		case <-b.queued:
		case <-timer.C:
			text(w, http.StatusRequestTimeout, "Retry")
			return
		case <-r.Context().Done():
			text(w, http.StatusRequestTimeout, "Retry")
			return
		}
	}
}

// result applies the checks of docs/protocol.md, "The session protocol" in order.
func (b *sessionBroker) result(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	p := b.pending
	b.mu.Unlock()
	if p == nil || !p.delivered {
		text(w, http.StatusConflict, "No matching turn")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, rtsandbox.MaxResultBody+1))
	var packet wire.ResultPacket
	if err != nil || len(body) > rtsandbox.MaxResultBody || json.Unmarshal(body, &packet) != nil {
		text(w, http.StatusBadRequest, "Invalid result")
		return
	}
	b.mu.Lock()
	if b.pending != p || packet.TurnID != p.turnID {
		b.mu.Unlock()
		text(w, http.StatusConflict, "No matching turn")
		return
	}
	b.pending = nil
	b.mu.Unlock()
	p.done <- packet.Result
	text(w, http.StatusOK, "Accepted")
}

// executeRaw queues a turn body and waits for its result.
func (b *sessionBroker) executeRaw(turnID string, body []byte) wire.SessionResult {
	b.t.Helper()
	p := &pendingTurn{body: body, turnID: turnID, done: make(chan wire.SessionResult, 1)}
	b.mu.Lock()
	b.pending = p
	b.mu.Unlock()
	select {
	case b.queued <- struct{}{}:
	default:
	}
	select {
	case r := <-p.done:
		return r
	case <-time.After(20 * time.Second):
		b.t.Fatalf("turn %s: no result", turnID)
		return wire.SessionResult{}
	}
}

// execute queues turn and waits for its result.
func (b *sessionBroker) execute(turn wire.SessionTurn) wire.SessionResult {
	b.t.Helper()
	body, err := jsonjs.Marshal(turn)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.executeRaw(turn.TurnID, body)
}

func (b *sessionBroker) messages(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.modelBodies = append(b.modelBodies, string(body))
	b.mu.Unlock()
	out, ok := rebuildMessages(b.t, body, b.level)
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	b.forward(w, r, b.model.URL()+"/v1/messages", out, nil)
}

// rebuildChat rebuilds the worker's chat body with the session broker's
// /model rule (modelapi.NormalizeChatWith, image parts admitted), failing
// the test on a refusal.
func rebuildChat(t *testing.T, body []byte) ([]byte, bool) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Errorf("worker body is not a JSON object: %v", err)
		return nil, false
	}
	in, err := modelapi.NormalizeChatWith(fields, modelapi.ChatOptions{ImageParts: true})
	if err != nil {
		t.Errorf("the session /model rule refuses the worker's body: %v\n%.2000s", err, body)
		return nil, false
	}
	out, err := jsonjs.Marshal(modelapi.BuildChatRequest("gpt-test", in, 4096))
	return out, err == nil
}

// forward posts body upstream and copies the answer back as it arrives,
// with its status and the allowed headers.
func (b *sessionBroker) forward(w http.ResponseWriter, r *http.Request, url string, body []byte, h http.Header) {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	if err != nil {
		text(w, http.StatusBadGateway, "Broker call failed")
		return
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Retry-After", "Mcp-Session-Id"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == statusOverloaded) && b.retryAfter != "" {
		w.Header().Set("Retry-After", b.retryAfter)
	}
	w.WriteHeader(resp.StatusCode)
	copyFlushing(w, resp.Body)
}

func (b *sessionBroker) tool(w http.ResponseWriter, r *http.Request, name string) {
	run, ok := b.tools[name]
	if !ok {
		text(w, http.StatusNotFound, "Not found")
		return
	}
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	if _, ok := object(obj["input"]); !ok {
		text(w, http.StatusBadRequest, "Invalid tool input")
		return
	}
	jsonAnswer(w, run(obj["input"]))
}

// mcpCall rebuilds and forwards one JSON-RPC message (docs/protocol.md, "MCP calls").
func (b *sessionBroker) mcpCall(w http.ResponseWriter, r *http.Request, server string) {
	url, ok := b.mcp[server]
	if !ok {
		text(w, http.StatusNotFound, "Not found")
		return
	}
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	method, _ := str(obj["method"])
	switch method {
	case "initialize", "notifications/initialized", "ping", "tools/list", "tools/call":
	default:
		text(w, http.StatusForbidden, "MCP method refused")
		return
	}
	if method == "tools/call" {
		b.mu.Lock()
		b.mcpCalls++
		expire := b.mcpCalls == b.expireAt
		b.mu.Unlock()
		if expire {
			text(w, http.StatusNotFound, "session expired")
			return
		}
	}
	rebuilt := map[string]json.RawMessage{"jsonrpc": json.RawMessage(`"2.0"`), "method": obj["method"]}
	for _, k := range []string{"id", "params"} {
		if v, ok := obj[k]; ok {
			rebuilt[k] = v
		}
	}
	out, _ := json.Marshal(rebuilt)
	h := http.Header{}
	for _, k := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
		if v := r.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	b.forward(w, r, url, out, h)
}

// readObject reads a credential route's body, which must be a JSON
// object, else 400 Invalid input (docs/session.md, "Routes and statuses").
func readObject(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, rtsandbox.MaxSessionRequest))
	obj, ok := object(body)
	if !ok {
		text(w, http.StatusBadRequest, "Invalid input")
	}
	return obj, ok
}

func (b *sessionBroker) gotRoutes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.routes)
}

func (b *sessionBroker) gotModelBodies() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.modelBodies)
}

func (b *sessionBroker) setConfig(format string, args ...any) {
	b.config = fmt.Sprintf(format, args...)
}
