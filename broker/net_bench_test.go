package broker_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// BenchmarkModelCallTransport is one model call with a 16 KiB markdown
// answer (JSON full of escapes, as real answers are) through the broker,
// side by side: on the turn's Unix socket, on the network listener with
// the turn's token over plain TCP, and over TLS (a fresh handshake per
// call: one request per connection, as on the socket). The differences of
// p50-ns are what the network transport costs a call.
func BenchmarkModelCallTransport(b *testing.B) {
	answer := string(answercorpus.Answer(answercorpus.Markdown, 16<<10))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
		io.WriteString(w, answer)
	}))
	defer srv.Close()
	br, err := broker.New(broker.Config{
		ModelURL: ep(srv.URL + "/v1"), Model: testModel, MaxCalls: rtsandbox.MaxCallsLimit,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return benchKey, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"messages":[{"role":"user","content":"hello"}]}`
	b.Run("socket", func(b *testing.B) {
		sock, err := broker.Listen(filepath.Join(b.TempDir(), "b.sock"), &turnSwitch{b: br, ctx: ctx}, broker.ListenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer sock.Close()
		c := &brokerclient.Client{Socket: sock.Path()}
		measure(b, func() { workerPost(b, c, body, len(answer)) })
	})
	cert, pool := selfSigned(b)
	for _, tc := range []struct {
		name       string
		serve, use *tls.Config
	}{
		{"network", nil, nil},
		{"network-tls", &tls.Config{Certificates: []tls.Certificate{cert}}, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tokens := broker.NewTokens()
			ln, err := broker.ListenNet("127.0.0.1:0", tokens, broker.NetOptions{TLS: tc.serve})
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			tok, revoke := tokens.Issue(ctx, &turnSwitch{b: br, ctx: ctx})
			defer revoke()
			c := &brokerclient.Client{Network: &brokerclient.Network{Addr: ln.Addr().String(), Token: tok.Reveal(), TLS: tc.use}}
			measure(b, func() { workerPost(b, c, body, len(answer)) })
		})
	}
}
