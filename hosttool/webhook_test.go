package hosttool_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/hosttool"
	"github.com/rtsandbox/rtsandbox/upstream"
)

const webhookKey = "whk-live-0123456789abcdef"

// Regression (review finding): an answer that echoes the bearer line
// base64-encoded carries the key at another byte alignment than its own
// base64, which the forms missed. Every alignment is refused now, and the
// key never reaches the caller.
func TestWebhookRefusesShiftedBase64(t *testing.T) {
	for name, text := range map[string]string{
		"bearer":        base64.StdEncoding.EncodeToString([]byte("Bearer " + webhookKey)),
		"authorization": base64.StdEncoding.EncodeToString([]byte("Authorization: Bearer " + webhookKey)),
		"offset-1":      base64.StdEncoding.EncodeToString([]byte("x" + webhookKey)),
		"offset-2-url":  base64.RawURLEncoding.EncodeToString([]byte("xy" + webhookKey)),
		"entities":      strings.ReplaceAll(webhookKey, "-", "&#x2d;"),
		"followed":      base64.StdEncoding.EncodeToString([]byte(webhookKey + "@example\r\n")),
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := json.Marshal(map[string]string{"text": "debug: " + text})
				w.Write(body)
			}))
			defer srv.Close()
			hook := &hosttool.Webhook{URL: upstream.MustParseEndpoint(srv.URL, true), Client: upstream.New(nil), Key: func() rtsandbox.Secret { return webhookKey }}
			got, err := hook.Run(context.Background(), json.RawMessage(`{}`), tc)
			if !errors.Is(err, upstream.ErrReflect) || got != "" {
				t.Errorf("Run = %q, %v; want upstream.ErrReflect", got, err)
			}
			if err != nil && strings.Contains(err.Error(), webhookKey) {
				t.Errorf("error %q holds the key", err)
			}
		})
	}
}

// An ordinary answer passes, markup and references included.
func TestWebhookPassesOrdinaryText(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"text":"R&amp;D <b>up</b> 3%, whk-live"}`)
	}))
	defer srv.Close()
	hook := &hosttool.Webhook{URL: upstream.MustParseEndpoint(srv.URL, true), Client: upstream.New(nil), Key: func() rtsandbox.Secret { return webhookKey }}
	if got, err := hook.Run(context.Background(), json.RawMessage(`{}`), tc); err != nil || got != "R&amp;D <b>up</b> 3%, whk-live" {
		t.Errorf("Run = %q, %v", got, err)
	}
}
