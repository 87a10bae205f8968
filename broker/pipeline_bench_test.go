package broker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// BenchmarkPipeline is the CPU cost of the broker's checks alone: the
// handler with an in-memory upstream, no sockets, for each answer corpus
// and size.
func BenchmarkPipeline(b *testing.B) {
	for _, kind := range answercorpus.Kinds() {
		for _, size := range benchSizes(kind) {
			br := pipelineBroker(b, string(answercorpus.Answer(kind, size)), nil)
			b.Run(string(kind)+"-"+sizeLabel(size), func(b *testing.B) { runPipeline(b, br) })
		}
	}
}

// BenchmarkPipelineObserved is BenchmarkPipeline's 1 KiB call with
// Config.Observe set (to an observer that only counts), so its difference
// to Pipeline/1KiB is what the observation hook costs.
func BenchmarkPipelineObserved(b *testing.B) {
	var n atomic.Int64
	br := pipelineBroker(b, string(answercorpus.Answer(answercorpus.Prose, 1<<10)), func(broker.CallRecord) { n.Add(1) })
	b.Run(sizeLabel(1<<10), func(b *testing.B) { runPipeline(b, br) })
}

func pipelineBroker(b *testing.B, answer string, observe func(broker.CallRecord)) *broker.Broker {
	client := upstream.New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: 200, ContentLength: int64(len(answer)), Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(answer))}, nil
	}))
	br, err := broker.New(broker.Config{ModelURL: ep("https://models.example/v1"), Model: testModel, Client: client,
		MaxCalls: rtsandbox.MaxCallsLimit, Observe: observe,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return benchKey, nil }})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func runPipeline(b *testing.B, br *broker.Broker) {
	sw := &turnSwitch{b: br, ctx: context.Background()}
	for b.Loop() {
		r := httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[{"role":"user","content":"hello"}]}`))
		r.Host = "broker"
		r.Header.Set("Authorization", "Bearer "+wire.DummyKey)
		w := httptest.NewRecorder()
		sw.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
