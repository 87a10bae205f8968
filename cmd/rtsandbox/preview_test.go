package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// A guest of `rtsandbox serve` with model.stream and http.preview sees
// progress: a sealed turn in Docker streams its Anthropic answer through
// the broker, and the chat API's event stream carries delta events for
// the message (their text a prefix of the answer) before the reply event,
// which is the worker's whole answer.
func TestServePreviewDeltasEndToEnd(t *testing.T) {
	parallelServe(t)
	tag, cli := sealedImage(t)
	const answer = "The streamed answer arrives in small pieces, one after another, until it is whole."
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true, StreamChunk: 6,
		StreamDelay: 250 * time.Millisecond}, fakemodel.Reply(answer))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.URL(), tag, addr)
	appendConfig(t, cfg, "  preview: true\n") // inside http:, which serveConfig writes last
	streamed(t, cfg)
	s := startServe(t, addr, "--config", cfg)

	ev, stopEvents := s.subscribe(t, "?channel=http:lobby")

	got := s.say(t, "http:lobby", "Tell me slowly.")
	if c := chunksOf(got); len(c) != 1 || c[0] != answer {
		t.Fatalf("reply = %+v; want the whole answer\nserve:\n%s", got, s.out.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ev.String(), "event: done") {
		if time.Now().After(deadline) {
			t.Fatalf("no done event within 10s:\n%s", ev.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopEvents()
	preview, order := deltasOf(t, ev.String())
	if preview == "" || !strings.HasPrefix(answer, preview) {
		t.Errorf("deltas join to %q; want a non-empty prefix of the answer\nevents:\n%s", preview, ev.String())
	}
	if want := "delta…reply…done"; order != want {
		t.Errorf("event order %q; want %q", order, want)
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
}

// streamed switches the config's model to Anthropic Messages, streamed.
func streamed(t *testing.T, cfg string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const key = "  api_key_env: RTS_SEALED_KEY\n"
	text := strings.Replace(string(b), key, key+"  api: anthropic\n  stream: true\n", 1)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deltasOf joins the chunks of the delta events of an event stream and
// names the order of the kinds of event (runs of one kind, typing left
// out) as "delta…reply…done".
func deltasOf(t *testing.T, stream string) (text, order string) {
	t.Helper()
	var kinds []string
	typ := ""
	for line := range strings.SplitSeq(stream, "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
			if typ != "typing" && (len(kinds) == 0 || kinds[len(kinds)-1] != typ) {
				kinds = append(kinds, typ)
			}
		case strings.HasPrefix(line, "data: ") && typ == "delta":
			var d struct {
				Chunk string `json:"chunk"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("delta data %q: %v", line, err)
			}
			text += d.Chunk
		}
	}
	return text, strings.Join(kinds, "…")
}
