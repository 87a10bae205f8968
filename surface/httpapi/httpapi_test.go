package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

func TestHealthzNeedsNoToken(t *testing.T) {
	f := newFixture(t, nil, nil)
	code, body := f.do(t, http.MethodGet, "/healthz", "", "")
	if code != http.StatusOK || body != `{"ok":true,"draining":false}`+"\n" {
		t.Errorf("GET /healthz = %d %q; want 200 ok, not draining", code, body)
	}
}

// TestReadyz: readiness follows the host's check and turns false at the
// start of a drain, while liveness stays 200 and says it drains.
func TestReadyz(t *testing.T) {
	var engineDown atomic.Bool
	f := newFixture(t, nil, func(o *Options) {
		o.Ready = func(context.Context) error {
			if engineDown.Load() {
				return errors.New("container engine unreachable")
			}
			return nil
		}
	})
	steps := []struct {
		name       string
		act        func()
		path, want string
		code       int
	}{
		{"ready", func() {}, "/readyz", `{"ready":true}`, 200},
		{"engine-down", func() { engineDown.Store(true) }, "/readyz", `{"ready":false,"reason":"degraded"}`, 503},
		{"engine-back", func() { engineDown.Store(false) }, "/readyz", `{"ready":true}`, 200},
		{"draining", f.api.Stop, "/readyz", `{"ready":false,"reason":"draining"}`, 503},
		{"alive-while-draining", func() {}, "/healthz", `{"ok":true,"draining":true}`, 200},
	}
	for _, st := range steps {
		st.act()
		if code, body := f.do(t, http.MethodGet, st.path, "", ""); code != st.code || body != st.want+"\n" {
			t.Errorf("%s: GET %s = %d %q; want %d %s", st.name, st.path, code, body, st.code, st.want)
		}
	}
}

func TestAuth(t *testing.T) {
	const msg = `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","mentions_bot":true}`
	tests := []struct {
		name, method, path, body string
		header                   []string
		configured               string // guest token configured
		want                     int
	}{
		{name: "guest-ok", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Bearer " + guestToken}, configured: guestToken, want: 202},
		{name: "scheme-case-insensitive", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "bearer " + guestToken}, configured: guestToken, want: 202},
		{name: "no-header", method: "POST", path: "/api/v1/messages", body: msg, configured: guestToken, want: 401},
		{name: "wrong-token", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Bearer nope"}, configured: guestToken, want: 401},
		{name: "token-prefix", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Bearer " + guestToken[:5]}, configured: guestToken, want: 401},
		{name: "basic-scheme", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Basic " + guestToken}, configured: guestToken, want: 401},
		{name: "empty-config-refuses-empty-bearer", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Bearer "}, configured: "", want: 401},
		{name: "empty-config-refuses-everything", method: "GET", path: "/api/v1/events", header: []string{"Authorization", "Bearer x"}, configured: "", want: 401},
		{name: "owner-token-not-a-guest-token", method: "POST", path: "/api/v1/messages", body: msg, header: []string{"Authorization", "Bearer " + ownerToken}, configured: guestToken, want: 401},
		{name: "guest-token-not-an-owner-token", method: "GET", path: "/api/v1/channels/http:lobby/sandbox", header: []string{"Authorization", "Bearer " + guestToken}, configured: guestToken, want: 403},
		{name: "owner-ok", method: "GET", path: "/api/v1/channels/http:lobby/sandbox", header: []string{"Authorization", "Bearer " + ownerToken}, configured: guestToken, want: 200},
	}
	f := newFixture(t, nil, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.token = tt.configured
			f.mu.Unlock()
			code, body := f.do(t, tt.method, tt.path, "", tt.body, tt.header...)
			if code != tt.want {
				t.Errorf("%s %s = %d %s; want %d", tt.method, tt.path, code, body, tt.want)
			}
			if code == 401 && body != `{"error":"missing or wrong bearer token"}`+"\n" {
				t.Errorf("401 body = %q", body)
			}
		})
	}
}

func TestTokenReadOnEveryRequest(t *testing.T) {
	f := newFixture(t, nil, nil)
	if code, _ := f.do(t, "GET", "/api/v1/channels/http:lobby/sandbox", ownerToken, ""); code != 200 {
		t.Fatalf("owner status = %d; want 200", code)
	}
	f.mu.Lock()
	f.token = "rotated"
	f.mu.Unlock()
	if code, _ := f.post(t, "hi", ""); code != http.StatusUnauthorized {
		t.Errorf("old token after rotation = %d; want 401", code)
	}
	code, _ := f.do(t, "POST", "/api/v1/messages", "rotated", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","mentions_bot":true}`)
	if code != http.StatusAccepted {
		t.Errorf("new token = %d; want 202", code)
	}
}

func TestBrowserAndHostHardening(t *testing.T) {
	f := newFixture(t, nil, func(o *Options) { o.AllowedOrigins = []string{"https://bridge.example"} })
	tests := []struct {
		name   string
		method string
		header []string
		want   int
	}{
		{"origin-refused", "GET", []string{"Origin", "https://evil.example"}, 403},
		{"null-origin-refused", "GET", []string{"Origin", "null"}, 403},
		{"allowed-origin", "GET", []string{"Origin", "https://bridge.example"}, 200},
		{"foreign-host-refused", "GET", []string{"Host", "rebind.evil.example:8787"}, 403},
		{"localhost-host", "GET", []string{"Host", "localhost:8787"}, 200},
		{"ipv6-loopback-host", "GET", []string{"Host", "[::1]:8787"}, 200},
		{"preflight-refused", "OPTIONS", []string{"Origin", "https://bridge.example", "Access-Control-Request-Method", "POST"}, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, f.srv.URL+"/healthz", nil)
			for i := 0; i < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			req.Host = req.Header.Get("Host")
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s /healthz = %d; want %d", tt.method, resp.StatusCode, tt.want)
			}
			for k := range resp.Header {
				if strings.HasPrefix(k, "Access-Control-") {
					t.Errorf("CORS header %s sent", k)
				}
			}
		})
	}
}

func TestRoutesAnswerJSON(t *testing.T) {
	f := newFixture(t, nil, nil)
	if code, body := f.do(t, "GET", "/nope", guestToken, ""); code != 404 || body != `{"error":"no such endpoint"}`+"\n" {
		t.Errorf("GET /nope = %d %q; want 404 JSON", code, body)
	}
	if code, body := f.do(t, "DELETE", "/api/v1/messages", guestToken, ""); code != 405 || body != `{"error":"method not allowed"}`+"\n" {
		t.Errorf("DELETE /api/v1/messages = %d %q; want 405 JSON", code, body)
	}
}

// messageValidationTests are refused message bodies and their answers;
// they also seed FuzzDecodeMessage.
var messageValidationTests = []bodyRefusal{
	{"unknown-key", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","mention":true}`, `unknown key "mention"`, 400},
	{"unknown-author-key", `{"channel":"http:lobby","author":{"id":"alice","role":"owner"},"text":"hi"}`, `unknown key "author.role"`, 400},
	{"duplicate-key", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","text":"again"}`, `duplicate key "text"`, 400},
	{"speaker-smuggling", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","speaker":{"id":"boss"}}`, `unknown key "speaker"`, 400},
	{"missing-author", `{"channel":"http:lobby","text":"hi"}`, `author: required`, 400},
	{"author-not-object", `{"channel":"http:lobby","author":"alice","text":"hi"}`, `author: must be an object`, 400},
	{"missing-author-id", `{"channel":"http:lobby","author":{"name":"A"},"text":"hi"}`, `author.id: required`, 400},
	{"author-id-space", `{"channel":"http:lobby","author":{"id":"a b"},"text":"hi"}`, `author.id: must be printable without whitespace, not start with "role:", and make http:<id> at most 256 characters`, 400},
	{"author-id-role", `{"channel":"http:lobby","author":{"id":"role:1"},"text":"hi"}`, `author.id: must be printable without whitespace, not start with "role:", and make http:<id> at most 256 characters`, 400},
	{"author-name-control", `{"channel":"http:lobby","author":{"id":"a","name":"A\u0007"},"text":"hi"}`, `author.name: at most 256 characters without control characters`, 400},
	{"channel-other-surface", `{"channel":"discord:1","author":{"id":"alice"},"text":"hi"}`, `channel: must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`, 400},
	{"channel-slash", `{"channel":"http:a/..","author":{"id":"alice"},"text":"hi"}`, `channel: must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`, 400},
	{"channel-too-long", `{"channel":"http:` + strings.Repeat("r", 201) + `","author":{"id":"alice"},"text":"hi"}`, `channel: must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`, 400},
	{"blank-text", `{"channel":"http:lobby","author":{"id":"alice"},"text":"  "}`, `text: required and not blank`, 400},
	{"text-too-long", `{"channel":"http:lobby","author":{"id":"alice"},"text":"` + strings.Repeat("a", rtsandbox.MaxTextLen+1) + `"}`, `text: at most 32000 characters of valid UTF-8`, 400},
	{"text-null", `{"channel":"http:lobby","author":{"id":"alice"},"text":null}`, `text: must be a string`, 400},
	{"bool-as-string", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","mentions_bot":"true"}`, `mentions_bot: must be true or false`, 400},
	{"wait-as-number", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","wait":1}`, `wait: must be true or false`, 400},
	{"trailing-data", `{"channel":"http:lobby","author":{"id":"alice"},"text":"hi"} {}`, `body: data after the JSON object`, 400},
	{"array", `[]`, `body: must be a JSON object`, 400},
	{"broken-json", `{"channel":`, `body: invalid JSON at byte 11`, 400},
	{"too-large", `{"channel":"http:lobby","author":{"id":"alice"},"text":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, `request body too large`, 413},
}

func TestMessageValidation(t *testing.T) {
	testRefusals(t, messageValidationTests)
}

func TestMessageNeedsJSONContentType(t *testing.T) {
	f := newFixture(t, nil, nil)
	code, _ := f.do(t, "POST", "/api/v1/messages", guestToken, `{}`, "Content-Type", "text/plain")
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST = %d; want 415", code)
	}
}

func TestWaitReturnsReplyChunks(t *testing.T) {
	para := strings.Repeat("x", 1500)
	rt := &fakeRuntime{Turn: func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: para + "\n\n" + para}, nil
	}}
	f := newFixture(t, rt, nil)
	code, body := f.post(t, "Hello", `,"reference_text":"earlier","wait":true`)
	if code != http.StatusOK {
		t.Fatalf("POST wait = %d %s; want 200", code, body)
	}
	got := decode[waitResponse](t, body)
	want := waitResponse{ID: got.ID, Channel: "http:lobby", Replies: []reply{{Chunks: []string{para, para}}}}
	if diff := cmp.Diff(want, got); diff != "" || !strings.HasPrefix(got.ID, "m_") {
		t.Errorf("wait response (-want +got):\n%s", diff)
	}
	calls := rt.Calls()
	wantCall := []turnCall{{Channel: lobby, Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "http:alice"},
		Text: router.QuotePrefix + "earlier\n\nHello", MessageID: got.ID}}
	if diff := cmp.Diff(wantCall, calls); diff != "" {
		t.Errorf("runtime calls (-want +got):\n%s", diff)
	}
}

func TestWaitFailedTurnAnswersFixedText(t *testing.T) {
	// Not rtsandbox.ErrBusy: the router answers that one with its busy
	// text (no free host slot), not the failure text.
	rt := &fakeRuntime{Turn: func(context.Context, turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{}, errors.New("the container engine went away")
	}}
	f := newFixture(t, rt, nil)
	code, body := f.post(t, "Hello", `,"wait":true`)
	got := decode[waitResponse](t, body)
	if code != 200 || len(got.Replies) != 1 || !cmp.Equal(got.Replies[0].Chunks, []string{rtsandbox.TurnFailedOrStoppedText}) {
		t.Errorf("failed turn = %d %s; want the fixed failure text", code, body)
	}
}

func TestAcceptedMessageStreamsEvents(t *testing.T) {
	f := newFixture(t, nil, nil)
	all := f.subscribe(t, "")
	other := f.subscribe(t, "?channel=http:other")
	code, body := f.post(t, "Hello", "")
	if code != http.StatusAccepted {
		t.Fatalf("POST = %d %s; want 202", code, body)
	}
	acc := decode[acceptedResponse](t, body)
	events := all.until(t, acc.ID)
	// Typing runs beside the turn, so it may come before or after the
	// reply; the reply is one event and done comes last.
	var replies []string
	typing := 0
	for _, e := range events {
		if e.Data.MessageID != acc.ID || e.Data.Channel != lobby {
			t.Errorf("event %+v not attributed to %s in %s", e, acc.ID, lobby)
		}
		switch e.Type {
		case EventTyping:
			typing++
		case EventReply:
			replies = append(replies, e.Data.Chunk)
		}
	}
	if typing == 0 || !cmp.Equal(replies, []string{"echo: Hello"}) || events[len(events)-1].Type != EventDone {
		t.Errorf("events = %+v; want typing, one reply \"echo: Hello\" and done last", events)
	}
	select {
	case e := <-other.events:
		t.Errorf("filtered stream got %+v", e)
	default:
	}
	if code, _ := f.do(t, "GET", "/api/v1/events?channel=discord:1", guestToken, ""); code != 400 {
		t.Errorf("events filter on a discord key = %d; want 400", code)
	}
}

// A message the router drops at once answers {"dropped":true} without
// waiting, in both modes, and queues nothing.
func TestDroppedMessageAnswersAtOnce(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, body := range []string{
		`{"channel":"http:lobby","author":{"id":"alice"},"text":"not for the bot"}`,
		`{"channel":"http:lobby","author":{"id":"alice"},"text":"not for the bot","wait":true}`,
		`{"channel":"http:closed","author":{"id":"alice"},"text":"hi","mentions_bot":true}`,
		`{"channel":"http:lobby","author":{"id":"mallory"},"text":"hi","mentions_bot":true}`,
		`{"channel":"http:lobby","author":{"id":"alice"},"text":"hi","mentions_bot":true,"is_direct":true}`,
	} {
		code, got := f.do(t, "POST", "/api/v1/messages", guestToken, body)
		if code != 200 || !decode[waitResponse](t, got).Dropped {
			t.Errorf("POST %s = %d %s; want 200 dropped", body, code, got)
		}
	}
	if n := f.api.held("http:lobby"); n != 0 {
		t.Errorf("held messages = %d; want 0", n)
	}
}

func TestPerChannelOrderAndConcurrency(t *testing.T) {
	release := make(chan struct{})
	started := make(chan rtsandbox.ChannelKey, 16)
	var mu sync.Mutex
	active := map[rtsandbox.ChannelKey]int{}
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		mu.Lock()
		active[c.Channel]++
		if active[c.Channel] > 1 {
			t.Errorf("two turns at once in %s", c.Channel)
		}
		mu.Unlock()
		started <- c.Channel
		<-release
		mu.Lock()
		active[c.Channel]--
		mu.Unlock()
		return rtsandbox.Reply{OK: true, Text: c.Text}, nil
	}}
	f := newFixture(t, rt, nil)
	_ = f.channels.Enable("http:b")
	s := f.subscribe(t, "")
	last := map[string]string{}
	for i := range 5 {
		for _, ch := range []string{"http:lobby", "http:b"} {
			code, body := f.do(t, "POST", "/api/v1/messages", guestToken,
				`{"channel":"`+ch+`","author":{"id":"bob"},"text":"m`+string(rune('0'+i))+`","mentions_bot":true}`)
			if code != 202 {
				t.Fatalf("POST %s m%d = %d %s", ch, i, code, body)
			}
			last[ch] = decode[acceptedResponse](t, body).ID
		}
	}
	// Both channels run a turn at the same time.
	got := map[rtsandbox.ChannelKey]bool{<-started: true, <-started: true}
	if len(got) != 2 {
		t.Errorf("first two turns ran in %v; want both channels at once", got)
	}
	close(release)
	seen := map[string]bool{}
	for len(seen) < 2 {
		e := s.next(t)
		if e.Type == EventDone && e.Data.MessageID == last[string(e.Data.Channel)] {
			seen[string(e.Data.Channel)] = true
		}
	}
	per := map[rtsandbox.ChannelKey][]string{}
	for _, c := range rt.Calls() {
		per[c.Channel] = append(per[c.Channel], c.Text)
	}
	want := []string{"m0", "m1", "m2", "m3", "m4"}
	for _, ch := range []rtsandbox.ChannelKey{lobby, "http:b"} {
		if !cmp.Equal(per[ch], want) {
			t.Errorf("turns in %s = %v; want %v", ch, per[ch], want)
		}
	}
}

func TestQueueLimit(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}}
	f := newFixture(t, rt, nil, queueLimit(2))
	defer close(release)
	for i, want := range []int{202, 202, 429} {
		code, body := f.post(t, "hi", "")
		if code != want {
			t.Errorf("POST %d = %d %s; want %d", i, code, body, want)
		}
		if code == 429 && decode[errorBody](t, body).Error != textChannelFull {
			t.Errorf("429 body = %s", body)
		}
	}
	// Another channel is not affected.
	code, _ := f.do(t, "POST", "/api/v1/messages", guestToken, `{"channel":"http:other","author":{"id":"alice"},"text":"hi"}`)
	if code == 429 {
		t.Errorf("POST in another channel = %d; want it unaffected by http:lobby's queue", code)
	}
}

func TestWaitTimeout(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "late"}, nil
	}}
	f := newFixture(t, rt, func(o *Options) { o.WaitTimeout = 50 * time.Millisecond })
	defer close(release)
	code, body := f.post(t, "hi", `,"wait":true`)
	if code != http.StatusGatewayTimeout || decode[errorBody](t, body).Error != textWaitTimeout {
		t.Errorf("POST wait = %d %s; want 504", code, body)
	}
}

func TestStopRefusesMessages(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "first"}, nil
	}}
	f := newFixture(t, rt, nil)
	first := make(chan waitResponse, 1)
	go func() {
		_, body := f.post(t, "first", `,"wait":true`)
		first <- decode[waitResponse](t, body)
	}()
	for len(rt.Calls()) == 0 {
		time.Sleep(time.Millisecond)
	}
	held := make(chan int, 1)
	go func() {
		code, _ := f.post(t, "held", `,"wait":true`)
		held <- code
	}()
	for f.api.held(lobby) < 2 {
		time.Sleep(time.Millisecond)
	}
	f.api.Stop()
	f.router.Drain()
	if code := <-held; code != http.StatusServiceUnavailable {
		t.Errorf("held message after Stop = %d; want 503", code)
	}
	if code, body := f.post(t, "late", ""); code != 503 || decode[errorBody](t, body).Error != textStopping {
		t.Errorf("POST after Stop = %d %s; want 503", code, body)
	}
	close(release)
	if got := <-first; len(got.Replies) != 1 || got.Replies[0].Chunks[0] != "first" {
		t.Errorf("running message after Stop = %+v; want its reply", got)
	}
}

func TestOwnerEndpoints(t *testing.T) {
	f := newFixture(t, nil, nil)
	const path = "/api/v1/channels/http:room2/sandbox"
	code, body := f.do(t, "GET", path, ownerToken, "")
	if want := (sandboxResponse{Channel: "http:room2", Enabled: false, Message: rtsandbox.DisabledText}); code != 200 || decode[sandboxResponse](t, body) != want {
		t.Errorf("GET status = %d %s; want %+v", code, body, want)
	}
	if code, body := f.do(t, "POST", "/api/v1/messages", guestToken, `{"channel":"http:room2","author":{"id":"alice"},"text":"hi","mentions_bot":true,"wait":true}`); !decode[waitResponse](t, body).Dropped {
		t.Errorf("message before on = %d %s; want dropped", code, body)
	}
	code, body = f.do(t, "POST", path, ownerToken, `{"enabled":true}`)
	if want := (sandboxResponse{Channel: "http:room2", Enabled: true, Message: rtsandbox.EnabledText}); code != 200 || decode[sandboxResponse](t, body) != want {
		t.Errorf("POST on = %d %s; want %+v", code, body, want)
	}
	if code, body := f.do(t, "POST", "/api/v1/messages", guestToken, `{"channel":"http:room2","author":{"id":"alice"},"text":"hi","mentions_bot":true,"wait":true}`); len(decode[waitResponse](t, body).Replies) != 1 {
		t.Errorf("message after on = %d %s; want a reply", code, body)
	}
	code, body = f.do(t, "POST", path, ownerToken, `{"enabled":false}`)
	if code != 200 || decode[sandboxResponse](t, body).Enabled {
		t.Errorf("POST off = %d %s; want disabled", code, body)
	}
	for _, tt := range []struct{ name, path, body, want string }{
		{"missing-enabled", path, `{}`, "enabled: required"},
		{"unknown-key", path, `{"enabled":true,"channel":"x"}`, `unknown key "channel"`},
		{"enabled-string", path, `{"enabled":"yes"}`, "enabled: must be true or false"},
		{"discord-key", "/api/v1/channels/discord:1/sandbox", `{"enabled":true}`, `channel: must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.do(t, "POST", tt.path, ownerToken, tt.body)
			if code != 400 || decode[errorBody](t, body).Error != tt.want {
				t.Errorf("POST %s = %d %s; want 400 %q", tt.body, code, body, tt.want)
			}
		})
	}
}

func TestOwnerEndpointNeedsOwnerIdentity(t *testing.T) {
	f := newFixture(t, nil, func(o *Options) { o.OwnerID = "alice" }) // a member, not an owner
	code, body := f.do(t, "POST", "/api/v1/channels/http:lobby/sandbox", ownerToken, `{"enabled":false}`)
	if code != 403 || decode[errorBody](t, body).Error != rtsandbox.NotOwnerText {
		t.Errorf("POST as a member = %d %s; want 403", code, body)
	}
	if !f.channels.Enabled(lobby) {
		t.Error("a refused owner command changed the channel")
	}
	g := newFixture(t, nil, func(o *Options) { o.OwnerID = ""; o.OwnerToken = nil })
	if code, _ := g.do(t, "GET", "/api/v1/channels/http:lobby/sandbox", ownerToken, ""); code != 401 {
		t.Errorf("owner endpoint without an owner token = %d; want 401", code)
	}
}

// TestOwnerCommandWaitsForQueuedTurns: "off" runs on the channel queue,
// after the turn already running there.
func TestOwnerCommandWaitsForQueuedTurns(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "done"}, nil
	}}
	f := newFixture(t, rt, nil)
	if code, _ := f.post(t, "long", ""); code != 202 {
		t.Fatal("POST failed")
	}
	for len(rt.Calls()) == 0 {
		time.Sleep(time.Millisecond)
	}
	off := make(chan int, 1)
	go func() {
		code, _ := f.do(t, "POST", "/api/v1/channels/http:lobby/sandbox", ownerToken, `{"enabled":false}`)
		off <- code
	}()
	select {
	case code := <-off:
		t.Fatalf("off finished (%d) while a turn ran", code)
	case <-time.After(100 * time.Millisecond):
	}
	if !f.channels.Enabled(lobby) {
		t.Error("off took effect before the running turn ended")
	}
	close(release)
	if code := <-off; code != 200 || f.channels.Enabled(lobby) {
		t.Errorf("off = %d, enabled %v; want 200 and disabled", code, f.channels.Enabled(lobby))
	}
}

func TestHubDropsSlowSubscriber(t *testing.T) {
	h := newHub(2, 4, DefaultMaxEventFileBytes)
	slow, _ := h.subscribe("")
	fast, _ := h.subscribe("")
	for i := range 3 {
		h.publish(Event{Type: EventReply, Channel: lobby, Chunk: string(rune('a' + i))})
		<-fast.events // fast keeps up
	}
	n := 0
	for range slow.events { // closed after its buffer filled
		n++
	}
	if n != 2 || !slow.overflow {
		t.Errorf("slow subscriber got %d events, overflow %v; want 2 and dropped", n, slow.overflow)
	}
	h.publish(Event{Type: EventReply, Channel: lobby})
	if e := <-fast.events; e.Type != EventReply {
		t.Errorf("fast subscriber lost events after the slow one was dropped")
	}
	for range 3 {
		if _, err := h.subscribe(""); err != nil && len(h.subs) < 4 {
			t.Fatal(err)
		}
	}
	if _, err := h.subscribe(""); err == nil {
		t.Error("subscribe beyond the bound succeeded")
	}
	h.close()
	if _, ok := <-fast.events; ok {
		t.Error("close left a stream open")
	}
}

func TestEventStreamEndsOnClose(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := f.subscribe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.api.Stop()
	if err := f.router.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.api.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatal("event stream still open after Close")
	}
	if code, _ := f.do(t, "GET", "/api/v1/events", guestToken, ""); code != 503 {
		t.Errorf("subscribe after Close = %d; want 503", code)
	}
}

// An owner token equal to the guest token would make every guest the
// owner; owner actions are refused instead (review finding).
func TestOwnerTokenEqualToGuestTokenRefused(t *testing.T) {
	f := newFixture(t, nil, func(o *Options) { o.OwnerToken = func() string { return guestToken } })
	if code, _ := f.do(t, "GET", "/api/v1/channels/http:lobby/sandbox", guestToken, ""); code != http.StatusForbidden {
		t.Errorf("owner action with the shared token = %d; want 403", code)
	}
}

// A fresh that found a session channel's own bounded workspace full is
// answered 507 with the workspace's text, not the host's disk-full text
// (issue 21: the owner was told the host's disk was full with 72 GB free).
func TestOwnerFreshWorkspaceFullNamed(t *testing.T) {
	enospc := &os.PathError{Op: "mkdir", Path: "sessions/archive", Err: syscall.ENOSPC}
	f := newFixture(t, &fakeRuntime{Turn: echo, FreshErr: fmt.Errorf("%w: %w", rtsandbox.ErrWorkspaceFull, enospc)}, nil)
	code, body := f.do(t, http.MethodPost, "/api/v1/channels/http:lobby/fresh", ownerToken, "")
	if code != http.StatusInsufficientStorage || !strings.Contains(body, rtsandbox.WorkspaceFullText) || strings.Contains(body, "host") {
		t.Errorf("fresh on a full workspace = %d %q; want 507 and the workspace-full text", code, body)
	}
}

// TestOwnerDiskFullNamed: a change the store cannot save because the disk
// is full is answered 507 with a text that says so, not a generic 500.
func TestOwnerDiskFullNamed(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.channels.mu.Lock()
	f.channels.fail = &os.PathError{Op: "write", Path: "/state/channels.json.tmp-x", Err: syscall.ENOSPC}
	f.channels.mu.Unlock()
	code, body := f.do(t, http.MethodPost, "/api/v1/channels/http:new/sandbox", ownerToken, `{"enabled":true}`)
	if code != http.StatusInsufficientStorage || !strings.Contains(body, rtsandbox.DiskFullText) {
		t.Errorf("owner on with a full disk = %d %q; want 507 and the disk-full text", code, body)
	}
	if f.channels.Enabled("http:new") {
		t.Error("channel enabled although the save failed")
	}
}
