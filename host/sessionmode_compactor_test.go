package host

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// compactorConfig is a session config whose compactor uses the models
// entry "fast" at url (the stand-in on loopback).
func compactorConfig(t *testing.T, url string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`state_dir: /var/lib/rtsandbox
allow_http: true
model: {url: "https://api.example/v1/chat/completions", name: m, api_key_env: KEY}
models:
  fast: {url: "` + url + `", name: summary-model, api_key_env: FAST_KEY}
profiles: {studio: {mode: session}}
default_profile: studio
session:
  compactor: {engine: summary, model: fast, timeout: 30s, max_request_mb: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// session.compactor builds the summary engine on the named model, with
// its settings, and reads the model's credential from the environment on
// every call, never before.
func TestSessionCompactorFromConfig(t *testing.T) {
	srv := fakemodel.New(fakemodel.Reply("S1"), fakemodel.Reply("S2"))
	defer srv.Close()
	key := "first-key"
	reads := 0
	getenv := func(name string) string {
		if name != "FAST_KEY" {
			return ""
		}
		reads++
		return key
	}
	comp, err := sessionCompactor(compactorConfig(t, srv.ChatURL()), getenv, upstream.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	if comp.Engine() != "summary" || comp.Timeout().Seconds() != 30 || comp.MaxRequestBytes() != 2<<20 || reads != 0 {
		t.Fatalf("compactor %s %v %d, %d credential reads before a call", comp.Engine(), comp.Timeout(), comp.MaxRequestBytes(), reads)
	}
	req := wire.CompactRequest{Reason: wire.CompactManual, FirstKeptEntryID: "e1",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}}
	for _, k := range []string{"first-key", "second-key"} {
		key = k
		if c, err := comp.Compact(context.Background(), req, "discord:party"); err != nil || c == nil {
			t.Fatalf("Compact = %v, %v", c, err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Authorization") != "Bearer first-key" || reqs[1].Header.Get("Authorization") != "Bearer second-key" {
		t.Errorf("the model saw %d calls with %v; want the key read per call", len(reqs), reqs)
	}
}

// Without session.compactor there is none.
func TestSessionCompactorOff(t *testing.T) {
	comp, err := sessionCompactor(parseSessionConfigWithout(t), nil, nil)
	if comp != nil || err != nil {
		t.Errorf("sessionCompactor = %v, %v; want none", comp, err)
	}
}

func parseSessionConfigWithout(t *testing.T) *config.Config {
	t.Helper()
	cfg := parseSessionConfig(t)
	cfg.Session.Compactor = nil
	return cfg
}

// A hand-built config naming a model that does not exist is refused, not
// run on another model.
func TestSessionCompactorUnknownModel(t *testing.T) {
	cfg := compactorConfig(t, "https://api.example/v1/chat/completions")
	cfg.Session.Compactor.Model = "gone"
	if _, err := sessionCompactor(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "session.compactor.model") {
		t.Errorf("sessionCompactor = %v; want a refusal naming session.compactor.model", err)
	}
}

// Each channel's broker gets the compactor: GET /worker/config names its
// engine, as the worker learns it.
func TestSessionBrokerNamesCompactor(t *testing.T) {
	cfg := compactorConfig(t, "https://api.example/v1/chat/completions")
	comp, err := sessionCompactor(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "b.sock")
	bc := broker.Config{ModelURL: upstream.MustParseEndpoint("https://api.example/v1/chat/completions", false), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil }}
	d := SessionDeps{Config: cfg, Brokers: map[string]broker.Config{"studio": bc}}
	b, err := sessionBroker(d, cfg, sessionBrokerFor{channel: "http:lobby", profile: "studio", image: "img:1", socket: socket}, comp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.(*broker.Session).Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	defer client.CloseIdleConnections()
	res, err := client.Get("http://broker" + wire.RouteWorkerConfig)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `"compaction":{"engine":"summary"}`) {
		t.Errorf("/worker/config = %s", body)
	}
}
