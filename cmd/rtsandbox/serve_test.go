package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

const (
	serveGuestToken = "serve-guest-token"
	serveOwnerToken = "serve-owner-token"
)

func serveEnv(k string) string {
	switch k {
	case "RTS_SEALED_KEY":
		return sealedTestKey
	case "RTS_SESSION_KEY":
		return sessionTestKey
	case "RTS_HTTP_TOKEN":
		return serveGuestToken
	case "RTS_OWNER_TOKEN":
		return serveOwnerToken
	}
	return ""
}

// freeAddr returns a loopback address with a port that was free a moment
// ago (config refuses port 0).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serveConfig writes a config for serve: the http surface on addr, alice
// a member, boss the owner, http:lobby sandboxed from the start.
func serveConfig(t testing.TB, modelURL, image, addr string) (path, state string) {
	t.Helper()
	path, state = sealedConfig(t, modelURL, image, workerUserFlag())
	extra := fmt.Sprintf("access:\n  owners: [\"http:boss\"]\n  members: [\"http:alice\"]\ninitial_channels: [\"http:lobby\"]\nhttp:\n  listen: %s\n  token_env: RTS_HTTP_TOKEN\n  owner_token_env: RTS_OWNER_TOKEN\n", addr)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(extra); err != nil {
		t.Fatal(err)
	}
	return path, state
}

// server is `rtsandbox serve` running in this process.
type server struct {
	base   string
	cancel context.CancelFunc
	done   chan int
	out    *syncbuf.Buffer
	client *http.Client
}

// startServe runs serve with args until the test stops it, and waits
// until /healthz answers.
func startServe(t testing.TB, addr string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{base: "http://" + addr, cancel: cancel, done: make(chan int, 1), out: &syncbuf.Buffer{},
		client: &http.Client{Transport: &http.Transport{}}}
	go func() {
		s.done <- run(ctx, append([]string{"serve"}, args...), serveEnv, strings.NewReader(""), s.out, s.out)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Error("serve did not stop within a minute")
		}
		s.client.CloseIdleConnections()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := s.client.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		select {
		case code := <-s.done:
			t.Fatalf("serve exited with %d before it was ready:\n%s", code, s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready within 30s:\n%s", s.out.String())
		}
	}
}

// stop sends the shutdown signal and returns the exit code.
func (s *server) stop(t testing.TB) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code
	case <-time.After(time.Minute):
		t.Fatalf("serve did not stop within a minute:\n%s", s.out.String())
	}
	return -1
}

func (s *server) call(t testing.TB, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type waitReply struct {
	ID      string `json:"id"`
	Dropped bool   `json:"dropped"`
	Replies []struct {
		Chunks []string `json:"chunks"`
	} `json:"replies"`
}

func (s *server) say(t testing.TB, channel, text string) waitReply {
	t.Helper()
	code, body := s.call(t, "POST", "/api/v1/messages", serveGuestToken,
		`{"channel":"`+channel+`","author":{"id":"alice","name":"Alice"},"text":"`+text+`","mentions_bot":true,"wait":true}`)
	if code != 200 {
		t.Fatalf("POST message = %d %s\nserve output:\n%s", code, body, s.out.String())
	}
	var w waitReply
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func chunksOf(w waitReply) []string {
	var out []string
	for _, r := range w.Replies {
		out = append(out, r.Chunks...)
	}
	return out
}

// TestServeHTTPEndToEnd drives a real sealed turn in Docker through the
// HTTP API of `rtsandbox serve`, the owner switch, the offline command's
// lock refusal, and a clean SIGTERM.
func TestServeHTTPEndToEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // first registered, so it runs last
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Reply("Hello from the sealed worker."))
	defer model.Close()
	addr := freeAddr(t)
	cfg, state := serveConfig(t, model.ChatURL(), tag, addr)
	s := startServe(t, addr, "--config", cfg, "--drain", "20s")

	if got := s.say(t, "http:lobby", "Hello"); len(chunksOf(got)) != 1 || chunksOf(got)[0] != "Hello from the sealed worker." {
		t.Errorf("reply = %+v; want the model's text", got)
	}
	reqs := model.Requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].UserText(), "Hello") || !strings.Contains(string(reqs[0].Raw), `\"id\":\"alice\"`) {
		t.Errorf("model saw %d requests (%q); want one carrying alice's message", len(reqs), reqs[0].UserText())
	}
	if got := s.say(t, "http:closed", "Hello"); !got.Dropped {
		t.Errorf("message in a channel that is not sandboxed = %+v; want dropped", got)
	}
	code, body := s.call(t, "POST", "/api/v1/channels/http:closed/sandbox", serveOwnerToken, `{"enabled":true}`)
	if code != 200 || !strings.Contains(body, `"enabled":true`) {
		t.Errorf("owner on = %d %s; want enabled", code, body)
	}
	if got := s.say(t, "http:closed", "Again"); len(chunksOf(got)) != 1 {
		t.Errorf("reply after on = %+v; want one chunk", got)
	}
	if code, body := s.call(t, "POST", "/api/v1/channels/http:closed/sandbox", serveGuestToken, `{"enabled":false}`); code != 403 || !strings.Contains(body, "needs the owner token") {
		t.Errorf("owner endpoint with the guest token = %d %s; want 403 saying the owner token is needed", code, body)
	}
	if code, out, errOut := runOps(t, "channels", "list", "--config", cfg); code != exitOK || out != "http:lobby\nhttp:closed\n" {
		t.Errorf("channels list while served = %d %q %q; want 0 and both channels", code, out, errOut)
	}
	if code, _, errOut := runOps(t, "channels", "off", "http:lobby", "--config", cfg); code != exitFail || !strings.Contains(errOut, "in use by a running rtsandbox serve") {
		t.Errorf("channels off while served = %d %q; want 1 and the lock message", code, errOut)
	}

	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d; want 0\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
	if entries, _ := os.ReadDir(filepath.Join(state, "run")); len(entries) != 0 {
		t.Errorf("run dirs left: %v", entries)
	}
	store, err := channels.Open(state, nil) // the lock is free again
	if err != nil {
		t.Fatalf("channel store after serve: %v", err)
	}
	defer store.Close()
	if want := []rtsandbox.ChannelKey{"http:lobby", "http:closed"}; fmt.Sprint(store.List()) != fmt.Sprint(want) {
		t.Errorf("channels after serve = %v; want %v", store.List(), want)
	}
	for _, line := range []string{`"msg":"serving"`, `"msg":"http chat API listening"`, `"msg":"stopped"`} {
		if !strings.Contains(s.out.String(), line) {
			t.Errorf("serve log lacks %s:\n%s", line, s.out.String())
		}
	}
	if strings.Contains(s.out.String(), sealedTestKey) || strings.Contains(s.out.String(), serveGuestToken) {
		t.Error("serve log contains a secret")
	}
}

// TestServeDrain: at SIGTERM a running turn may finish within --drain and
// its reply is still delivered; past --drain it is cancelled, answered with
// the restarting text (the router cancels it with the cause ErrStopping,
// issue 22), and its container removed. serve exits 0 both times.
func TestServeDrain(t *testing.T) {
	tag, cli := sealedImage(t)
	tests := []struct {
		name  string
		drain string
		want  string
	}{
		{"turn-finishes", "30s", "Finished during the drain."},
		{"turn-cancelled", "1s", rtsandbox.RestartingText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, started, release := blockingModel(t, "Finished during the drain.")
			addr := freeAddr(t)
			cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
			s := startServe(t, addr, "--config", cfg, "--drain", tt.drain)
			got := s.sayAsync(t, "slow")
			select {
			case <-started:
			case <-time.After(60 * time.Second):
				t.Fatalf("the turn never reached the model:\n%s", s.out.String())
			}
			stopped := make(chan int, 1)
			go func() { stopped <- s.stop(t) }()
			if tt.name == "turn-finishes" {
				time.Sleep(300 * time.Millisecond) // SIGTERM is in; the turn still runs
				release()
			}
			if w := <-got; len(chunksOf(w)) != 1 || chunksOf(w)[0] != tt.want {
				t.Errorf("reply = %+v; want %q", w, tt.want)
			}
			if code := <-stopped; code != exitOK {
				t.Errorf("serve exit = %d; want 0\n%s", code, s.out.String())
			}
			assertNoTurnContainers(t, cli, tag)
		})
	}
}

// TestReapAgainstRunningServer is finding 6: `rtsandbox reap` run while
// serve holds the same state directory removed a container mid-turn. Now
// it refuses, and the turn in flight ends with its own reply.
func TestReapAgainstRunningServer(t *testing.T) {
	tag, cli := sealedImage(t)
	model, started, release := blockingModel(t, "Survived the reap.")
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	s := startServe(t, addr, "--config", cfg)
	got := s.sayAsync(t, "slow")
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatalf("the turn never reached the model:\n%s", s.out.String())
	}
	code, out, errOut := runOps(t, "reap", "--config", cfg)
	if code != exitFail || out != "" || !strings.Contains(errOut, "in use by a running rtsandbox") {
		t.Errorf("reap while served = %d %q %q; want 1 and the lock message", code, out, errOut)
	}
	release()
	if w := <-got; len(chunksOf(w)) != 1 || chunksOf(w)[0] != "Survived the reap." {
		t.Errorf("reply = %+v; want the turn's own answer", w)
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("serve exit = %d; want 0\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
	if code, out, errOut := runOps(t, "reap", "--config", cfg); code != exitOK || !strings.HasPrefix(out, "removed 0 ") {
		t.Errorf("reap after serve stopped = %d %q %q; want 0 and removed 0", code, out, errOut)
	}
}

// TestServeRefusesDeletedStore: after the first start a missing channel
// store is an error naming the file; --reseed seeds it on purpose.
func TestServeRefusesDeletedStore(t *testing.T) {
	cfg, state := channelsConfig(t, "http:\n  token_env: RTS_HTTP_TOKEN\n")
	store, err := channels.Open(state, []rtsandbox.ChannelKey{"http:lobby"})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	if err := os.Remove(filepath.Join(state, channels.StateFile)); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runOps(t, "serve", "--config", cfg)
	if code != exitFail || !strings.Contains(errOut, filepath.Join(state, channels.StateFile)) || !strings.Contains(errOut, "--reseed") {
		t.Errorf("serve with a deleted store = %d %q; want 1 naming the file and --reseed", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(state, channels.StateFile)); err == nil {
		t.Error("serve re-seeded the store silently")
	}
}

// TestServeRefusedStartSeedsNothing (issue 26 item 3): a first start
// refused by the start checks (here: the HTTP token's variable is not set)
// writes neither channels.json nor its record, so initial_channels is
// still the config's at the start that succeeds.
func TestServeRefusedStartSeedsNothing(t *testing.T) {
	cfg, state := channelsConfig(t, "http:\n  token_env: RTS_TEST_UNSET_TOKEN_26\ninitial_channels: [\"http:lobby\"]\n")
	code, _, errOut := runOps(t, "serve", "--config", cfg)
	if code == exitOK || !strings.Contains(errOut, "RTS_TEST_UNSET_TOKEN_26") {
		t.Fatalf("serve without the token's variable = %d %q; want refused, naming it", code, errOut)
	}
	for _, f := range []string{channels.StateFile, channels.SeededFile} {
		if _, err := os.Lstat(filepath.Join(state, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a refused start: %v; want none", f, err)
		}
	}
}

func TestServeRefusesLockedState(t *testing.T) {
	cfg, state := channelsConfig(t, "http:\n  token_env: RTS_HTTP_TOKEN\n")
	held, err := channels.Open(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	code, _, errOut := runOps(t, "serve", "--config", cfg)
	if code != exitFail || !strings.Contains(errOut, "is in use by another rtsandbox serve") {
		t.Errorf("serve on a locked state_dir = %d %q; want 1 and the lock message", code, errOut)
	}
}

func TestServeUsage(t *testing.T) {
	noSurface, _ := channelsConfig(t, "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no-config", []string{"serve"}, "--config is required"},
		{"no-surface", []string{"serve", "--config", noSurface}, "enables no chat surface"},
		{"bad-drain", []string{"serve", "--config", noSurface, "--drain", "0s"}, "--drain must be positive"},
		{"positional", []string{"serve", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runOps(t, tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("%v = %d %q; want %d and %q", tt.args, code, errOut, exitUsage, tt.want)
			}
		})
	}
}

// TestServeSecondSignalCutsDrain: the first signal starts the drain and
// turns readiness false while a turn still runs; a second signal cancels
// that turn at once (the guest gets the fixed text) and serve returns well
// before --drain.
func TestServeSecondSignalCutsDrain(t *testing.T) {
	tag, cli := sealedImage(t)
	model, started, _ := blockingModel(t, "too late")
	addr := freeAddr(t)
	path, _ := serveConfig(t, model.ChatURL(), tag, addr)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	force := make(chan struct{})
	out := &syncbuf.Buffer{}
	done := make(chan error, 1)
	log := slog.New(slog.NewJSONHandler(out, nil))
	go func() { done <- serve(ctx, cfg, serveEnv, log, time.Minute, force, serveNet{}) }()
	s := &server{base: "http://" + addr, out: out, client: &http.Client{Transport: &http.Transport{}}}
	defer s.client.CloseIdleConnections()
	waitReady(t, s)
	got := s.sayAsync(t, "slow")
	<-started
	cancel() // the first signal
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := s.call(t, "GET", "/readyz", "", "")
		if code == 503 && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz during the drain = %d %s; want 503 draining", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	forcedAt := time.Now()
	close(force) // the second signal
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still draining 30s after the second signal:\n%s", out.String())
	}
	if d := time.Since(forcedAt); d > 15*time.Second {
		t.Errorf("serve returned %v after the second signal; want promptly", d)
	}
	if w := <-got; len(chunksOf(w)) != 1 || chunksOf(w)[0] != rtsandbox.RestartingText {
		t.Errorf("reply = %+v; want the restarting text", w)
	}
	if !strings.Contains(out.String(), "second signal") {
		t.Errorf("serve log does not say the drain was cut:\n%s", out.String())
	}
	assertNoTurnContainers(t, cli, tag)
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, s *server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := s.client.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("serve not ready within 30s:\n%s", s.out.String())
}

// blockingModel is a stand-in model whose answer (content) waits until
// release is called; started receives once per request. release is also
// called when the test ends, and may be called more than once.
func blockingModel(t *testing.T, content string) (model *fakemodel.Server, started <-chan struct{}, release func()) {
	t.Helper()
	start, gate := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	model = fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey}, fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		start <- struct{}{}
		<-gate
		return fakemodel.Response{Content: content}
	}))
	t.Cleanup(model.Close)
	t.Cleanup(release) // runs first: a held request must not block Close
	return model, start, release
}

// sayAsync posts a waiting message from alice to http:lobby; its answer
// arrives on the returned channel.
func (s *server) sayAsync(t *testing.T, text string) <-chan waitReply {
	got := make(chan waitReply, 1)
	go func() {
		_, body := s.call(t, "POST", "/api/v1/messages", serveGuestToken,
			`{"channel":"http:lobby","author":{"id":"alice"},"text":"`+text+`","mentions_bot":true,"wait":true}`)
		var w waitReply
		_ = json.Unmarshal([]byte(body), &w)
		got <- w
	}()
	return got
}

// TestServeOwnerOffWaitsForAcceptedMessages is issue 10's ordering bug: an
// owner's off over HTTP overtook messages the API had accepted with 202
// (7 of 8 were dropped). Now off runs on the channel's queue behind them:
// it is answered only after every message accepted before it had its turn.
func TestServeOwnerOffWaitsForAcceptedMessages(t *testing.T) {
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Reply("Answered."))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	s := startServe(t, addr, "--config", cfg)

	const accepted = 8 // the channel's queue bound (router.DefaultQueueLimit)
	for i := range accepted {
		code, body := s.call(t, "POST", "/api/v1/messages", serveGuestToken,
			fmt.Sprintf(`{"channel":"http:lobby","author":{"id":"alice","name":"Alice"},"text":"message %d","mentions_bot":true}`, i))
		if code != http.StatusAccepted {
			t.Fatalf("POST message %d = %d %s; want 202", i, code, body)
		}
	}
	code, body := s.call(t, "POST", "/api/v1/channels/http:lobby/sandbox", serveOwnerToken, `{"enabled":false}`)
	if code != http.StatusOK || !strings.Contains(body, `"enabled":false`) {
		t.Fatalf("owner off = %d %s; want 200 and disabled", code, body)
	}
	reqs := model.Requests()
	if len(reqs) != accepted {
		t.Fatalf("turns before off answered = %d; want all %d accepted messages\n%s", len(reqs), accepted, s.out.String())
	}
	for i, r := range reqs {
		if want := fmt.Sprintf("message %d", i); !strings.Contains(r.UserText(), want) {
			t.Errorf("turn %d saw %q; want %q (arrival order)", i, r.UserText(), want)
		}
	}
	if strings.Contains(s.out.String(), `"reason":"not_sandboxed"`) {
		t.Errorf("an accepted message was dropped by the later off:\n%s", s.out.String())
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d; want 0\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
}

// TestChatServerTalksToServe: chat --server holds a terminal conversation
// with a running serve through its HTTP chat API, beside it on the same
// machine (a local chat on serve's state directory is refused: its lock),
// and /fresh runs with the owner token.
func TestChatServerTalksToServe(t *testing.T) {
	tag, _ := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Reply("Hello from the sealed worker."))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	s := startServe(t, addr, "--config", cfg)
	code, stdout, stderr := runSealed(t, serveEnv, "hello\n/fresh\n/quit\n", "chat", "--server", s.base,
		"--channel", "http:lobby", "--author", "alice", "--token-env", "RTS_HTTP_TOKEN", "--owner-token-env", "RTS_OWNER_TOKEN")
	if code != exitOK {
		t.Fatalf("chat --server = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"rtsandbox chat in http:lobby as alice", "agent> Hello from the sealed worker.", rtsandbox.FreshText} {
		if !strings.Contains(stdout, want) {
			t.Errorf("chat output lacks %q:\n%s", want, stdout)
		}
	}
	if code, _, stderr := runSealed(t, serveEnv, "/quit\n", "chat", "--config", cfg); code == exitOK || !strings.Contains(stderr, "in use") {
		t.Errorf("a local chat on serve's state dir = %d %q; want refused as in use", code, stderr)
	}
}

// TestChatServerFlags: each misuse of chat --server is refused by the
// flag at fault before anything is sent.
func TestChatServerFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  env
		want string
	}{
		{"http-to-another-host", []string{"--server", "http://192.0.2.1:8787"}, serveEnv, "--server: \"http://192.0.2.1:8787\": plain http only to a loopback host"},
		{"not-a-base", []string{"--server", "http://127.0.0.1:8787/api/v1"}, serveEnv, "give the API's base only"},
		{"user-info", []string{"--server", "https://u:p@example.com"}, serveEnv, "give the API's base only"},
		{"not-http", []string{"--server", "ftp://127.0.0.1"}, serveEnv, "not an http(s) URL"},
		{"non-http-channel", []string{"--server", "http://127.0.0.1:8787", "--channel", "discord:1"}, serveEnv, "--channel: must be an http: channel key"},
		{"bad-author", []string{"--server", "http://127.0.0.1:8787", "--author", "a b"}, serveEnv, "--author:"},
		{"token-unset", []string{"--server", "http://127.0.0.1:8787", "--token-env", "RTS_NOT_SET"}, serveEnv, "--token-env: RTS_NOT_SET is unset or empty"},
		{"with-config", []string{"--server", "https://example.com", "--token-env", "RTS_HTTP_TOKEN", "--config", "x.yaml"}, serveEnv, "--config: not with --server"},
		{"channel-without-server", []string{"--config", "x.yaml", "--channel", "http:x"}, serveEnv, "--channel: only with --server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runSealed(t, tt.env, "", append([]string{"chat"}, tt.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("chat %q = %d %q; want 2 and %q", tt.args, code, stderr, tt.want)
			}
		})
	}
}

// TestServeSeedsAfterRefusedStart (issue 26 item 3, whole): a first start
// refused (the guest token's variable unset) seeds nothing; the operator
// fixes the environment and adds a channel to initial_channels; the start
// that succeeds seeds both, and the HTTP API answers in both.
func TestServeSeedsAfterRefusedStart(t *testing.T) {
	tag, _ := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Reply("Seeded."))
	defer model.Close()
	addr := freeAddr(t)
	cfg, state := serveConfig(t, model.ChatURL(), tag, addr)
	noToken := func(k string) string {
		if k == "RTS_HTTP_TOKEN" {
			return ""
		}
		return serveEnv(k)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--config", cfg}, noToken, strings.NewReader(""), &out, &errOut); code != exitFail {
		t.Fatalf("serve without the token = %d; want 1\n%s%s", code, out.String(), errOut.String())
	}
	for _, f := range []string{channels.StateFile, channels.SeededFile} {
		if _, err := os.Lstat(filepath.Join(state, f)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after a refused start: %v; want none", f, err)
		}
	}
	body, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fixed := strings.Replace(string(body), `initial_channels: ["http:lobby"]`, `initial_channels: ["http:lobby", "http:hall"]`, 1)
	if fixed == string(body) {
		t.Fatal("the config has no initial_channels line to extend")
	}
	if err := os.WriteFile(cfg, []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, addr, "--config", cfg)
	for _, ch := range []string{"http:lobby", "http:hall"} {
		if got := chunksOf(s.say(t, ch, "hi")); !cmp.Equal(got, []string{"Seeded."}) {
			t.Errorf("reply in %s = %q; want the seeded channel answered", ch, got)
		}
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve = %d\n%s", code, s.out.String())
	}
	if code, out, errOut := runOps(t, "channels", "list", "--config", cfg); code != exitOK || out != "http:hall\nhttp:lobby\n" && out != "http:lobby\nhttp:hall\n" {
		t.Errorf("channels list = %d %q %q; want both seeded channels", code, out, errOut)
	}
}

// serveLanes bounds the end-to-end tests that run beside each other
// (parallelServe).
var serveLanes = make(chan struct{}, 2)

// parallelServe lets t run beside the package's other parallel tests:
// each of them has its own image tag, state directory, installation and
// ports, and spends most of its time waiting on Docker, a container or a
// timer, so two at once take about the time of one. At most two run at
// once whatever -test.parallel allows, so that container starts never
// come in bursts (Docker 20.10 deadlocked here under them). Call it
// first: its slot is given back after the test's other cleanups.
func parallelServe(t *testing.T) {
	t.Parallel()
	serveLanes <- struct{}{}
	t.Cleanup(func() { <-serveLanes })
}
