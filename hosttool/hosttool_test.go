package hosttool_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/hosttool"
	"github.com/rtsandbox/rtsandbox/upstream"
)

var tc = rtsandbox.Binding{
	Channel: "http:lobby",
	Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"},
}

func TestWebhookSendsBoundContextAndReadsKeyEachCall(t *testing.T) {
	var got []map[string]any
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		got = append(got, body)
		auth = append(auth, r.Header.Get("Authorization"))
		io.WriteString(w, `{"text":"sunny"}`)
	}))
	defer srv.Close()
	var n atomic.Int32
	hook := &hosttool.Webhook{URL: upstream.MustParseEndpoint(srv.URL, true), Client: upstream.New(nil), Key: func() rtsandbox.Secret {
		return rtsandbox.Secret("tool-key-" + string(rune('0'+n.Add(1))))
	}}
	for range 2 {
		text, err := hook.Run(context.Background(), json.RawMessage(`{"city":"Berlin","speaker":"owner"}`), tc)
		if err != nil || text != "sunny" {
			t.Fatalf("Run = %q, %v; want sunny", text, err)
		}
	}
	want := map[string]any{
		"input":   map[string]any{"city": "Berlin", "speaker": "owner"},
		"channel": "http:lobby",
		"speaker": map[string]any{"id": "alice", "name": "Alice", "principal_id": "p_alice"},
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("webhook body (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Bearer tool-key-1", "Bearer tool-key-2"}, auth); diff != "" {
		t.Errorf("webhook authorization (-want +got):\n%s", diff)
	}
}

func TestWebhookFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
	}{
		{"status-201", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201); io.WriteString(w, `{"text":"x"}`) }, upstream.ErrStatus},
		{"status-500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, upstream.ErrStatus},
		{"no-text", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"result":"x"}`) }, hosttool.ErrBadAnswer},
		{"text-not-string", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"text":5}`) }, hosttool.ErrBadAnswer},
		{"array", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `["x"]`) }, hosttool.ErrBadAnswer},
		{"not-json", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `sunny`) }, upstream.ErrNotJSON},
		{"reflects-key", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"text":"k is webhook-key"}`) }, upstream.ErrReflect},
		{"redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) }, upstream.ErrRedirect},
		{"too-large", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"text":"`+strings.Repeat("x", upstream.MaxResponseBytes)+`"}`)
		}, upstream.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			hook := &hosttool.Webhook{URL: upstream.MustParseEndpoint(srv.URL, true), Client: upstream.New(nil), Key: func() rtsandbox.Secret { return "webhook-key" }}
			_, err := hook.Run(context.Background(), json.RawMessage(`{}`), tc)
			if !errors.Is(err, tt.want) {
				t.Errorf("Run = %v; want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "webhook-key") {
				t.Errorf("error %q holds the key", err)
			}
		})
	}
}

func TestWebhookHonoursDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	hook := &hosttool.Webhook{URL: upstream.MustParseEndpoint(srv.URL, true), Client: upstream.New(nil)}
	if _, err := hook.Run(ctx, json.RawMessage(`{}`), tc); !errors.Is(err, upstream.ErrCanceled) {
		t.Errorf("Run past deadline = %v; want ErrCanceled", err)
	}
}

func TestClock(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC) }
	berlin, _ := time.LoadLocation("Europe/Berlin")
	c := hosttool.Clock{Now: now, Location: berlin}
	tests := []struct {
		name, input, want string
		err               error
	}{
		{"default-zone", `{}`, "2026-01-02T16:04:05+01:00 (Friday, 2 January 2026 16:04:05 CET, Europe/Berlin)", nil},
		{"other-zone", `{"time_zone":"Asia/Taipei"}`, "2026-01-02T23:04:05+08:00", nil},
		{"unknown-zone", `{"time_zone":"Mars/Olympus"}`, "", hosttool.ErrZone},
		{"path-traversal", `{"time_zone":"../../etc/passwd"}`, "", hosttool.ErrZone},
		{"absolute-path", `{"time_zone":"/etc/localtime"}`, "", hosttool.ErrZone},
		{"local", `{"time_zone":"Local"}`, "", hosttool.ErrZone},
		{"not-json", `x`, "", rtsandbox.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Run(context.Background(), json.RawMessage(tt.input), tc)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("Run(%s) error = %v; want %v", tt.input, err, tt.err)
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("Run(%s) = %q; want prefix %q", tt.input, got, tt.want)
			}
		})
	}
}
