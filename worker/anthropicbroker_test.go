package worker

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// anthropicBroker stands in for the broker's Anthropic route until the
// real one is in this tree: on a real Unix socket, with the worker header
// rules of fakeBroker, it rebuilds each Messages body with
// modelapi.NormalizeMessages exactly as the broker must (docs/protocol.md, "Model calls") and fails
// the test on a refusal, forwards the rebuilt body to the stand-in model's
// /v1/messages and copies the answer back as it arrives, with its status,
// content type and retry-after (docs/session.md, "Routes and statuses", 17, 18). Host tools answer
// {"text":"<name> ran"}.
type anthropicBroker struct {
	t      *testing.T
	sock   string
	model  *fakemodel.Server
	level  modelapi.ThinkingLevel
	client *http.Client

	mu         sync.Mutex
	routes     []string
	bodies     []string // the worker's Messages bodies, as sent
	retryAfter []string // retry-after for successive 429/529 answers; "" sends none
}

func startAnthropicBroker(t *testing.T, model *fakemodel.Server, level modelapi.ThinkingLevel) *anthropicBroker {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections) // runs after the server's shutdown
	b := &anthropicBroker{t: t, model: model, level: level, client: &http.Client{Transport: tr}}
	b.sock = serveUnix(t, b)
	return b
}

func (b *anthropicBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Connection", "close")
	if err := checkWorkerRequest(r, len(body)); err != nil {
		b.t.Errorf("broker request %s: %v", r.URL.Path, err)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	b.mu.Lock()
	b.routes = append(b.routes, r.URL.Path)
	b.mu.Unlock()
	switch {
	case r.URL.Path == wire.RouteAnthropicMessages:
		b.messages(w, r, body)
	case strings.HasPrefix(r.URL.Path, wire.RouteToolPrefix):
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"text":"`+strings.TrimPrefix(r.URL.Path, wire.RouteToolPrefix)+` ran"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (b *anthropicBroker) messages(w http.ResponseWriter, r *http.Request, body []byte) {
	b.mu.Lock()
	b.bodies = append(b.bodies, string(body))
	b.mu.Unlock()
	out, ok := rebuildMessages(b.t, body, b.level)
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, b.model.URL()+"/v1/messages", bytes.NewReader(out))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == statusOverloaded {
		if after := b.nextRetryAfter(); after != "" {
			w.Header().Set("Retry-After", after)
		}
	}
	w.WriteHeader(resp.StatusCode)
	copyFlushing(w, resp.Body)
}

// rebuildMessages rebuilds the worker's Messages body with
// modelapi.NormalizeMessages exactly as the broker must (docs/protocol.md, "Model calls"), failing
// the test on a refusal.
func rebuildMessages(t *testing.T, body []byte, level modelapi.ThinkingLevel) ([]byte, bool) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Errorf("worker body is not a JSON object: %v", err)
		return nil, false
	}
	rebuilt, err := modelapi.NormalizeMessages(fields, modelapi.MessagesParams{Model: "claude-test", Level: level})
	if err != nil {
		t.Errorf("the broker's Messages rebuild refuses the worker's body: %v\n%.2000s", err, body)
		return nil, false
	}
	out, err := jsonjs.Marshal(rebuilt)
	return out, err == nil
}

func (b *anthropicBroker) nextRetryAfter() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.retryAfter) == 0 {
		return ""
	}
	after := b.retryAfter[0]
	b.retryAfter = b.retryAfter[1:]
	return after
}

// copyFlushing copies the body piece by piece, flushing each, as the
// streaming broker does.
func copyFlushing(w http.ResponseWriter, r io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 4<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

func (b *anthropicBroker) gotRoutes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.routes)
}

func (b *anthropicBroker) gotBodies() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.bodies)
}

// anthropicTurn is testTurn for a host whose model speaks Messages.
func anthropicTurn(text string, stream bool) wire.Turn {
	turn := testTurn("alice", text)
	turn.ModelAPI, turn.Stream = rtsandbox.ModelAPIAnthropic, stream
	return turn
}

// runAnthropic runs turn against b with an empty channel.
func runAnthropic(t *testing.T, b *anthropicBroker, turn wire.Turn) runResult {
	t.Helper()
	in, err := jsonjs.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	return runWorkerRaw(t, b.sock, string(in))
}
