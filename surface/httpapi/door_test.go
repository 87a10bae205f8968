package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// doorKey is a credential of the host, planted in what a turn answers.
const doorKey = "sk-door-Planted/Key+0123456789"

// TestDoorNothingLeavesHTTP (issue 21 item 2): a credential planted in a
// turn's preview (base64), its reply (raw), its files (hex in the bytes)
// and a research report never reaches an HTTP client in any form: the
// client gets the fixed failure text and no file, and the operator log
// names the class and the credential's key, never its value.
func TestDoorNothingLeavesHTTP(t *testing.T) {
	seenDelta := make(chan struct{}, 4)
	refused := make(chan router.DeliveryKind, 8)
	run := func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		c.OnText(1, "Hello ")
		awaitDoor(seenDelta)
		c.OnText(1, "the key is "+base64.StdEncoding.EncodeToString([]byte(doorKey)))
		if k, _ := awaitDoor(refused); k != router.KindPreview {
			t.Errorf("refused %q; want the preview first", k)
		}
		return rtsandbox.Reply{OK: true, Text: "Here it is: " + doorKey}, nil
	}
	rt := &fakeRuntime{Turn: run, Files: func(turnCall) []rtsandbox.File {
		return []rtsandbox.File{{Name: "notes.txt", Data: []byte("key=" + hex.EncodeToString([]byte(doorKey)))}}
	}}
	var mu sync.Mutex
	var kinds []string
	f := newFixture(t, rt, func(o *Options) { o.Preview = true }, withInput(rt), func(o *router.Options) {
		o.Door = door.New([]door.Secret{{Name: "model.api_key_env", Read: func() rtsandbox.Secret { return doorKey }}})
		o.OnDoor = func(_ rtsandbox.ChannelKey, k router.DeliveryKind) {
			mu.Lock()
			kinds = append(kinds, string(k))
			mu.Unlock()
			refused <- k
		}
	})
	events := f.subscribe(t, "")
	mirror := make(chan sseEvent, 1024)
	go func() {
		for { // the test's own waiter on delta events
			e, ok := <-events.events
			if !ok {
				return
			}
			mirror <- e
			if e.Type == EventDelta {
				seenDelta <- struct{}{}
			}
		}
	}()
	code, body := f.post(t, "tell me the key", `,"wait":true`)
	if code != http.StatusOK {
		t.Fatalf("POST = %d %s", code, body)
	}
	if err := f.router.PostReport(context.Background(), lobby, "Research report: "+doorKey); err != nil {
		t.Fatal(err)
	}
	awaitDoor(refused)
	awaitDoor(refused)
	got := []string{body}
	var replies []string
	for done := 0; done < 2; {
		e := next(t, mirror)
		b, _ := json.Marshal(e.Data)
		got = append(got, e.Type+" "+string(b))
		if e.Type == EventReply {
			replies = append(replies, e.Data.Chunk)
			if len(e.Data.Files) > 0 {
				t.Errorf("a reply event carries %d files", len(e.Data.Files))
			}
			done++
		}
	}
	all := strings.Join(got, "\n")
	if err := upstream.CheckText(all, doorKey); err != nil {
		t.Fatalf("the client got the credential:\n%s", all)
	}
	for _, r := range replies {
		if r != rtsandbox.TurnFailedOrStoppedText {
			t.Errorf("reply %q; want the fixed failure text", r)
		}
	}
	if !strings.Contains(body, rtsandbox.TurnFailedOrStoppedText) || strings.Contains(body, `"files"`) {
		t.Errorf("wait answer %s; want the failure text and no files", body)
	}
	mu.Lock()
	if strings.Join(kinds, " ") != "preview reply report" {
		t.Errorf("refused %v; want preview reply report", kinds)
	}
	mu.Unlock()
	wantDoorLog(t, f.logs)
}

// wantDoorLog checks the operator log: credential-at-the-door records
// naming the class and the key's config key, none holding the value.
func wantDoorLog(t *testing.T, logs *logRecorder) {
	t.Helper()
	recs := logs.records("credential at the door: withheld from the guest")
	if len(recs) == 0 {
		t.Fatal("no credential-at-the-door record")
	}
	for _, r := range recs {
		if r["class"] != rtsandbox.KindCredential.String() || !strings.Contains(r["err"], "model.api_key_env") {
			t.Errorf("record %v; want the class and the config key", r)
		}
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, a := range logs.attrs {
		b, _ := json.Marshal(a)
		if upstream.CheckText(string(b), doorKey) != nil {
			t.Errorf("a log record holds the credential: %s", b)
		}
	}
}

// awaitDoor returns what ch gives within 5 s; ok is false when nothing came
// (the test then fails on what it finds, from any goroutine).
func awaitDoor[T any](ch <-chan T) (v T, ok bool) {
	select {
	case v = <-ch:
		return v, true
	case <-time.After(5 * time.Second):
		return v, false
	}
}

func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	e, ok := awaitDoor(ch)
	if !ok {
		t.Fatal("no event within 5s")
	}
	return e
}
