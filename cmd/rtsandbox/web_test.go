package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// researchModel scripts both agents on one stand-in: the sealed worker
// asks host_research for a report, and the host-side research worker
// (recognised by its web_search tool) searches once and reports.
func researchModel(req fakemodel.Request) fakemodel.Response {
	research, answered := false, false
	for _, tool := range req.Body.Tools {
		research = research || tool.Function.Name == "web_search"
	}
	for _, m := range req.Body.Messages {
		answered = answered || m.Role == "tool"
	}
	switch {
	case research && !answered:
		return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("web_search", map[string]any{"query": "the answer"})}}
	case research:
		return fakemodel.Response{Content: "The answer is 42 (source: https://docs.example.org/answer)."}
	case !answered:
		return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_research",
			map[string]any{"title": "The answer", "task": "Find the answer and cite a source."})}}
	default:
		return fakemodel.Response{Content: "I started the research; the report will be posted here."}
	}
}

// events collects the server-sent events of the chat API.
type events struct {
	mu   sync.Mutex
	text strings.Builder
}

func (e *events) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		e.mu.Lock()
		e.text.WriteString(sc.Text() + "\n")
		e.mu.Unlock()
	}
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.text.String()
}

// The research tool and a delegated job run end to end: a sealed turn in
// Docker calls host_research, the host-side research worker searches a
// loopback SearXNG stand-in through the configured model, and the report
// reaches the channel through the HTTP chat API's event stream.
func TestServeResearchEndToEnd(t *testing.T) {
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Func(researchModel))
	defer model.Close()
	var searches []string
	var mu sync.Mutex
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		searches = append(searches, r.URL.Query().Get("q"))
		mu.Unlock()
		io.WriteString(w, `{"results":[{"title":"The answer","url":"https://docs.example.org/answer","content":"It is 42."}]}`)
	}))
	defer searx.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, "web:\n  search: {provider: searxng, url: "+searx.URL+"/search}\n  research: {enabled: true, model: fake-model, timeout: 60s}\n")
	s := startServe(t, addr, "--config", cfg, "--drain", "20s")

	ev, stopEvents := s.subscribe(t, "")

	// The report waits on the channel's queue behind the turn, so the
	// turn's answer holds only the agent's own reply.
	got := s.say(t, "http:lobby", "Please research the answer.")
	if c := chunksOf(got); len(c) != 1 || !strings.Contains(c[0], "started the research") {
		t.Fatalf("turn reply = %+v; want only the agent's confirmation", got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(ev.String(), "The answer is 42") {
		if time.Now().After(deadline) {
			t.Fatalf("no research report on the event stream within 60s:\n%s\nserve:\n%s", ev.String(), s.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(ev.String(), "Research #1 (The answer) is ready") || !strings.Contains(ev.String(), `"channel":"http:lobby"`) {
		t.Errorf("report event lacks the fixed heading or the channel:\n%s", ev.String())
	}
	mu.Lock()
	if len(searches) != 1 || searches[0] != "the answer" {
		t.Errorf("searches = %q; want one for the answer", searches)
	}
	mu.Unlock()
	stopEvents()
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
	if strings.Contains(s.out.String(), sealedTestKey) {
		t.Error("serve log contains the model key")
	}
}

// subscribe reads serve's chat API event stream (query "" or
// "?channel=…") in the background until stop, which waits for the reader.
func (s *server) subscribe(t *testing.T, query string) (ev *events, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/api/v1/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+serveGuestToken)
	resp, err := s.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("GET events = %v %v", resp, err)
	}
	ev = &events{}
	done := make(chan struct{})
	go func() { defer close(done); ev.read(resp.Body) }()
	return ev, func() { cancel(); resp.Body.Close(); <-done }
}

func appendConfig(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
