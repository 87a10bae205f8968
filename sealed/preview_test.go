package sealed

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// RunTurnText hands the turn's broker the observer: the text of a
// streamed answer the worker asks for reaches it, numbered, while the
// reply stays the worker's own.
func TestRunTurnTextReportsStreamedText(t *testing.T) {
	const answer = "Streamed through the turn's broker."
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: hostKey, StreamChunk: 5}, fakemodel.Reply(answer))
	defer model.Close()
	f := newFixture(t, func(f *fixture) {
		f.cfg.API, f.cfg.Stream = rtsandbox.ModelAPIAnthropic, true
		f.cfg.ModelURL = upstream.MustParseEndpoint(model.URL(), true)
	})
	f.driver.run = func(ctx context.Context, spec container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
		status, body := mustPost(t, ctx, spec, wire.RouteAnthropicMessages,
			`{"stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 || !strings.Contains(body, "text_delta") {
			t.Errorf("streamed call = %d %.200q", status, body)
		}
		return rtsandbox.Reply{OK: true, Text: "The worker's reply."}, nil
	}
	var mu sync.Mutex
	var text strings.Builder
	var answers []int
	onText := func(n int, delta string) {
		mu.Lock()
		defer mu.Unlock()
		text.WriteString(delta)
		if len(answers) == 0 || answers[len(answers)-1] != n {
			answers = append(answers, n)
		}
	}
	reply, err := f.rt.RunTurnText(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hi", onText)
	if err != nil {
		t.Fatalf("RunTurnText = %v", err)
	}
	if reply.Text != "The worker's reply." {
		t.Errorf("reply = %q, want the worker's", reply.Text)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(answer, text.String()); diff != "" {
		t.Errorf("observed text (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1}, answers); diff != "" {
		t.Errorf("answer numbers (-want +got):\n%s", diff)
	}
}
