package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// blockingRuntime runs turns until release is closed or the turn is
// stopped.
func blockingRuntime(release <-chan struct{}) *fakeRuntime {
	return &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		select {
		case <-release:
			return rtsandbox.Reply{OK: true, Text: "done: " + c.Text}, nil
		case <-ctx.Done():
			return rtsandbox.Reply{}, ctx.Err()
		}
	}}
}

func TestOwnerFreshAndStop(t *testing.T) {
	tests := []struct {
		name, path, body string
		want             actionResponse
	}{
		{"fresh", "/api/v1/channels/http:lobby/fresh", "", actionResponse{"http:lobby", rtsandbox.FreshText}},
		{"fresh-empty-object", "/api/v1/channels/http:lobby/fresh", "{}", actionResponse{"http:lobby", rtsandbox.FreshText}},
		{"fresh-not-sandboxed", "/api/v1/channels/http:elsewhere/fresh", "", actionResponse{"http:elsewhere", rtsandbox.NotOwnedText}},
		{"stop-idle", "/api/v1/channels/http:lobby/stop", "", actionResponse{"http:lobby", rtsandbox.IdleText}},
		{"stop-not-sandboxed", "/api/v1/channels/http:elsewhere/stop", "", actionResponse{"http:elsewhere", rtsandbox.IdleText}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			code, body := f.do(t, http.MethodPost, tt.path, ownerToken, tt.body)
			if code != http.StatusOK || decode[actionResponse](t, body) != tt.want {
				t.Errorf("POST %s = %d %s; want 200 %+v", tt.path, code, body, tt.want)
			}
		})
	}
}

func TestOwnerActionRefusals(t *testing.T) {
	f := newFixture(t, nil, nil)
	const fresh = "/api/v1/channels/http:lobby/fresh"
	tests := []struct {
		name, method, path, token, body string
		wantCode                        int
		wantError                       string
	}{
		{"guest-token", http.MethodPost, fresh, guestToken, "", 403, textOwnerToken},
		{"no-token", http.MethodPost, "/api/v1/channels/http:lobby/stop", "", "", 401, textUnauthorized},
		{"get", http.MethodGet, fresh, ownerToken, "", 405, textMethod},
		{"unknown-key", http.MethodPost, fresh, ownerToken, `{"now":true}`, 400, `unknown key "now"`},
		{"not-an-object", http.MethodPost, "/api/v1/channels/http:lobby/stop", ownerToken, `[]`, 400, "body: must be a JSON object"},
		{"discord-key", http.MethodPost, "/api/v1/channels/discord:1/stop", ownerToken, "", 400,
			`channel: must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.do(t, tt.method, tt.path, tt.token, tt.body)
			if code != tt.wantCode || decode[errorBody](t, body).Error != tt.wantError {
				t.Errorf("%s %s = %d %s; want %d %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantError)
			}
		})
	}
	if got := f.rt.Fresh(); len(got) != 0 {
		t.Errorf("refused requests started fresh: %v", got)
	}
}

// fresh waits behind the running turn, like on and off; stop does not
// wait and ends the running turn.
func TestOwnerFreshWaitsStopDoesNot(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	rt := blockingRuntime(release)
	f := newFixture(t, rt, nil)
	turn := make(chan waitResponse, 1)
	go func() { _, body := f.post(t, "long", `,"wait":true`); turn <- decode[waitResponse](t, body) }()
	waitFor(t, func() bool { return len(rt.Calls()) == 1 })
	fresh := make(chan string, 1)
	go func() {
		_, body := f.do(t, http.MethodPost, "/api/v1/channels/http:lobby/fresh", ownerToken, "")
		fresh <- body
	}()
	waitFor(t, func() bool { return f.router.QueueSize(lobby) == 2 })
	select {
	case body := <-fresh:
		t.Fatalf("fresh answered %s while the turn ran; want it to wait behind the turn", body)
	case <-time.After(50 * time.Millisecond):
	}
	code, body := f.do(t, http.MethodPost, "/api/v1/channels/http:lobby/stop", ownerToken, "")
	if want := (actionResponse{"http:lobby", rtsandbox.StoppedText}); code != 200 || decode[actionResponse](t, body) != want {
		t.Errorf("POST stop = %d %s; want 200 %+v", code, body, want)
	}
	got := <-turn
	if diff := cmp.Diff([]reply{{Chunks: []string{rtsandbox.TurnFailedOrStoppedText}}}, got.Replies); diff != "" {
		t.Errorf("stopped turn's replies (-want +got):\n%s", diff)
	}
	if want := (actionResponse{"http:lobby", rtsandbox.FreshText}); decode[actionResponse](t, <-fresh) != want {
		t.Errorf("fresh after the turn; want %+v", want)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{lobby}, rt.Fresh()); diff != "" {
		t.Errorf("runtime StartFresh (-want +got):\n%s", diff)
	}
}

func TestOwnerUsage(t *testing.T) {
	const path = "/api/v1/channels/http:lobby/usage"
	f := newFixture(t, nil, func(o *Options) {
		o.Usage = func(_ context.Context, ch rtsandbox.ChannelKey) (any, error) {
			return map[string]any{"channel": string(ch), "calls": 3}, nil
		}
	})
	code, body := f.do(t, http.MethodGet, path, ownerToken, "")
	if want := `{"calls":3,"channel":"http:lobby"}` + "\n"; code != http.StatusOK || body != want {
		t.Errorf("GET %s = %d %q; want 200 %q", path, code, body, want)
	}
	if code, _ := f.do(t, http.MethodGet, path, guestToken, ""); code != http.StatusForbidden {
		t.Errorf("GET %s with the guest token = %d; want 403", path, code)
	}
	f = newFixture(t, nil, nil)
	if code, body := f.do(t, http.MethodGet, path, ownerToken, ""); code != http.StatusNotFound || decode[errorBody](t, body).Error != textNoBudgets {
		t.Errorf("GET %s without budgets = %d %s; want 404 %q", path, code, body, textNoBudgets)
	}
}
