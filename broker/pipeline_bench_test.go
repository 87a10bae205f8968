package broker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BenchmarkPipeline is the CPU cost of the broker's checks alone: the
// handler with an in-memory upstream, no sockets.
func BenchmarkPipeline(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 1<<20 - 256} {
		answer := benchAnswer(size)
		client := upstream.New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			io.Copy(io.Discard, r.Body)
			return &http.Response{StatusCode: 200, ContentLength: int64(len(answer)), Header: http.Header{},
				Body: io.NopCloser(strings.NewReader(answer))}, nil
		}))
		br, err := broker.New(broker.Config{ModelURL: "https://models.example/v1", Model: testModel, Client: client,
			MaxCalls: rtsandbox.MaxCallsLimit,
			APIKey:   func(context.Context, broker.Scope) (rtsandbox.Secret, error) { return benchKey, nil }})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sizeLabel(size), func(b *testing.B) {
			sw := &turnSwitch{b: br, ctx: context.Background()}
			for b.Loop() {
				r := httptest.NewRequest("POST", "/model", strings.NewReader(`{"messages":[{"role":"user","content":"hello"}]}`))
				r.Host = "broker"
				r.Header.Set("Authorization", "Bearer "+rtsandbox.DummyKey)
				w := httptest.NewRecorder()
				sw.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
