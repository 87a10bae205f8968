package fakemodel

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, opts Options, script ...Step) *Server {
	t.Helper()
	s := NewWithOptions(opts, script...)
	t.Cleanup(s.Close)
	return s
}

// post sends body to the server's chat URL with the given bearer key ("" for
// none) and returns the status and the decoded JSON reply.
func post(t *testing.T, s *Server, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", s.ChatURL(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("reply %q is not JSON: %v", raw, err)
	}
	return resp.StatusCode, got
}

const chatBody = `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],"max_tokens":7}`

func TestReplyWireShape(t *testing.T) {
	s := start(t, Options{}, Reply("hello"))
	status, got := post(t, s, "", chatBody)
	want := map[string]any{
		"id": "chatcmpl-fake-0", "object": "chat.completion", "created": float64(0), "model": "m",
		"choices": []any{map[string]any{
			"index": float64(0), "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "hello"},
		}},
	}
	if status != 200 {
		t.Errorf("status = %d; want 200", status)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reply mismatch (-want +got):\n%s", diff)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("Requests() = %d; want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("recorded %s %s %v; want POST /v1/chat/completions with the content type", r.Method, r.Path, r.Header)
	}
	if r.Body.Model != "m" || r.Body.MaxTokens != 7 || r.System() != "sys" || r.UserText() != "hi" || string(r.Raw) != chatBody {
		t.Errorf("recorded body = %+v; want the decoded chat body", r.Body)
	}
}

func TestCallToolsWireShape(t *testing.T) {
	s := start(t, Options{}, CallTools(
		Call("memory_get", map[string]string{"scope": "speaker"}),
		withID(Call("host_clock", `{}`), "mine"),
	))
	_, got := post(t, s, "", chatBody)
	want := []any{map[string]any{
		"index": float64(0), "finish_reason": "tool_calls",
		"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": "call_0_0", "type": "function", "function": map[string]any{"name": "memory_get", "arguments": `{"scope":"speaker"}`}},
			map[string]any{"id": "mine", "type": "function", "function": map[string]any{"name": "host_clock", "arguments": `{}`}},
		}},
	}}
	if diff := cmp.Diff(want, got["choices"]); diff != "" {
		t.Errorf("choices mismatch (-want +got):\n%s", diff)
	}
}

func TestFuncSeesRequest(t *testing.T) {
	s := start(t, Options{}, Func(func(r Request) Response {
		return Response{Content: "echo " + r.UserText() + " at " + r.Path}
	}), Func(func(Request) Response { return Response{Status: 503, Raw: []byte(`{"error":"x"}`)} }))
	if _, got := post(t, s, "", chatBody); got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "echo hi at /v1/chat/completions" {
		t.Errorf("Func reply = %v", got)
	}
	if status, got := post(t, s, "", chatBody); status != 503 || got["error"] != "x" {
		t.Errorf("scripted status = %d, %v; want 503 with the raw body", status, got)
	}
}

func TestKey(t *testing.T) {
	s := start(t, Options{Key: "k1"}, Reply("ok"))
	for _, key := range []string{"", "k2", "k1x"} {
		if status, _ := post(t, s, key, chatBody); status != 401 {
			t.Errorf("post with key %q = %d; want 401", key, status)
		}
	}
	if s.Remaining() != 1 {
		t.Errorf("Remaining() = %d after refused requests; want 1 (no step consumed)", s.Remaining())
	}
	if status, _ := post(t, s, "k1", chatBody); status != 200 {
		t.Errorf("post with the key = %d; want 200", status)
	}
	if n := len(s.Requests()); n != 4 {
		t.Errorf("Requests() = %d; want all 4 recorded", n)
	}
}

func TestExhaustedAndLoop(t *testing.T) {
	once := start(t, Options{}, Reply("a"))
	post(t, once, "", chatBody)
	if status, _ := post(t, once, "", chatBody); status != 500 {
		t.Errorf("exhausted script = %d; want 500", status)
	}
	loop := start(t, Options{Loop: true}, Reply("a"), Reply("b"))
	var texts []string
	for range 4 {
		_, got := post(t, loop, "", chatBody)
		texts = append(texts, got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string))
	}
	if diff := cmp.Diff([]string{"a", "b", "b", "b"}, texts); diff != "" {
		t.Errorf("loop replies mismatch (-want +got):\n%s", diff)
	}
}

func TestRefusedRequests(t *testing.T) {
	s := start(t, Options{}, Reply("a"))
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"get", "GET", "/v1/chat/completions", "", 405},
		{"not-json", "POST", "/v1/chat/completions", "{", 400},
		{"messages-content-not-blocks", "POST", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400},
		{"messages-not-json", "POST", "/v1/messages", `{`, 400},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, s.URL()+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status = %d; want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
	if s.Remaining() != 1 {
		t.Errorf("Remaining() = %d; want 1", s.Remaining())
	}
}

func TestConcurrentRequests(t *testing.T) {
	s := start(t, Options{Loop: true}, Reply("a"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { post(t, s, "", chatBody) })
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, r := range s.Requests() {
		seen[r.Index] = true
	}
	if len(seen) != 8 {
		t.Errorf("distinct request indexes = %d; want 8", len(seen))
	}
}

func TestUserTextUnwrapsWorkerMessage(t *testing.T) {
	r := Request{Body: ChatRequest{Messages: []Message{
		{Role: "user", Content: json.RawMessage(`"old"`)},
		{Role: "user", Content: json.RawMessage(`"{\"speaker\":{\"id\":\"u1\",\"name\":\"A\"},\"message\":\"hi there\"}"`)},
		{Role: "assistant", Content: json.RawMessage(`null`)},
	}}}
	if got := r.UserText(); got != "hi there" {
		t.Errorf("UserText() = %q; want %q", got, "hi there")
	}
}

// Chunks are sent verbatim, in order, with the pause after each.
func TestChunks(t *testing.T) {
	const delay = 20 * time.Millisecond
	s := start(t, Options{StreamDelay: delay}, Func(func(Request) Response {
		return Response{Status: 500, ContentType: "text/event-stream", Chunks: [][]byte{[]byte("host-"), []byte("secret")}}
	}))
	begin := time.Now()
	resp, err := http.Post(s.ChatURL(), "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "host-secret" || resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("body = %q, %v, status %d, %s; want both chunks, 500, text/event-stream", body, err, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if took := time.Since(begin); took < 2*delay {
		t.Errorf("answer took %v; want at least the two pauses (%v)", took, 2*delay)
	}
}
