package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

// A handler panic aborts that response only: it is logged without the
// request's content and the server keeps answering.
func TestHandlerPanicAbortsOnlyThatRequest(t *testing.T) {
	var broken atomic.Bool
	logs := &syncbuf.Buffer{}
	f := newFixture(t, nil, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		o.Token = func() string {
			if broken.Load() {
				panic("token store broke")
			}
			return guestToken
		}
	})
	broken.Store(true)
	body := `{"channel":"http:lobby","author":{"id":"alice","name":"Alice"},"text":"secret-words","mentions_bot":true,"wait":true}`
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/api/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+guestToken)
	if resp, err := f.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a panicking handler answered %d; want the response aborted", resp.StatusCode)
	}
	broken.Store(false)
	code, got := f.post(t, "hello", `,"wait":true`)
	if code != http.StatusOK || !strings.Contains(got, "echo: hello") {
		t.Errorf("next request = %d %s; want the echo", code, got)
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"recovered from a panic"`) || !strings.Contains(l, `"where":"http handler"`) {
		t.Errorf("no recovered panic logged:\n%s", l)
	} else if strings.Contains(l, "secret-words") || strings.Contains(l, "token store broke") {
		t.Errorf("the log holds request content or the panic value:\n%s", l)
	}
}

// A runtime that panics is answered with the router's fixed failure text,
// and the channel's next message is answered.
func TestRuntimePanicAnsweredOverHTTP(t *testing.T) {
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Text == "explode" {
			panic("runtime broke")
		}
		return echo(ctx, c)
	}}
	f := newFixture(t, rt, nil)
	for _, tc := range []struct{ text, want string }{
		{"explode", rtsandbox.TurnFailedOrStoppedText},
		{"hello", "echo: hello"},
	} {
		code, body := f.post(t, tc.text, `,"wait":true`)
		got := decode[waitResponse](t, body)
		if code != http.StatusOK || len(got.Replies) != 1 || !cmp.Equal(got.Replies[0].Chunks, []string{tc.want}) {
			t.Errorf("%s = %d %s; want the reply %q", tc.text, code, body, tc.want)
		}
	}
}
