package broker_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// BenchmarkModelCall compares the same /model call sent directly to a
// loopback upstream and sent through the broker on a Unix socket with
// every check (headers, budget, normalisation, key lookup, rebuilt body,
// reflection scan of the answer), for each answer corpus and size. The
// added latency is the difference of the p50-ns metrics of a corpus and
// size's direct and broker sub-benchmarks, or, measured on a machine
// whose load varies, the added-p50-ns of its added sub-benchmark, which
// alternates the two call by call.
func BenchmarkModelCall(b *testing.B) {
	for _, kind := range answercorpus.Kinds() {
		for _, size := range benchSizes(kind) {
			answer := string(answercorpus.Answer(kind, size))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
				io.WriteString(w, answer)
			}))
			body := `{"messages":[{"role":"user","content":"hello"}]}`
			b.Run(string(kind)+"-"+sizeLabel(size), func(b *testing.B) {
				b.Run("direct", func(b *testing.B) {
					c := &http.Client{Transport: upstream.NewTransport()}
					defer c.CloseIdleConnections()
					measure(b, func() { post(b, c, srv.URL+"/v1", body, len(answer)) })
				})
				// Both Unix-socket paths use the worker's own transport.
				b.Run("bare-proxy", func(b *testing.B) {
					c := &brokerclient.Client{Socket: bareProxy(b, srv.URL+"/v1")}
					measure(b, func() { workerPost(b, c, body, len(answer)) })
				})
				b.Run("broker", func(b *testing.B) {
					c := &brokerclient.Client{Socket: benchBroker(b, srv.URL+"/v1")}
					measure(b, func() { workerPost(b, c, body, len(answer)) })
				})
				// One direct call and one through the broker per
				// iteration, so that both see the same load: the p50 of
				// the per-iteration differences is what the broker adds.
				b.Run("added", func(b *testing.B) {
					d := &http.Client{Transport: upstream.NewTransport()}
					defer d.CloseIdleConnections()
					c := &brokerclient.Client{Socket: benchBroker(b, srv.URL+"/v1")}
					var direct, via, added []time.Duration
					for b.Loop() {
						start := time.Now()
						post(b, d, srv.URL+"/v1", body, len(answer))
						mid := time.Now()
						workerPost(b, c, body, len(answer))
						end := time.Now()
						direct, via, added = append(direct, mid.Sub(start)), append(via, end.Sub(mid)), append(added, end.Sub(mid)-mid.Sub(start))
					}
					reportP50(b, "direct-p50-ns", direct)
					reportP50(b, "broker-p50-ns", via)
					reportP50(b, "added-p50-ns", added)
				})
			})
			srv.Close()
		}
	}
}

// benchSizes are the answer sizes measured: 1 KiB only for escape-free
// prose (the fixed cost of a call), 16 KiB and 1 MiB for every corpus.
func benchSizes(kind answercorpus.Kind) []int {
	sizes := []int{16 << 10, 1<<20 - 256}
	if kind == answercorpus.Prose {
		sizes = append([]int{1 << 10}, sizes...)
	}
	return sizes
}

func workerPost(b *testing.B, c *brokerclient.Client, body string, want int) {
	got, err := c.Post(context.Background(), wire.RouteModel, []byte(body))
	if err != nil || len(got) != want {
		b.Fatalf("Post = %d bytes, %v; want %d", len(got), err, want)
	}
}

// bareProxy is the floor the broker is measured against: the same Unix
// socket, one request per connection and the same upstream client, but no
// checks at all (no header rules, budget, normalisation or reflection
// scan). broker minus bare-proxy is what the checks cost; bare-proxy minus
// direct is what the extra hop costs.
func bareProxy(b *testing.B, modelURL string) string {
	b.Helper()
	client := upstream.New(nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp, err := client.Post(r.Context(), upstream.Call{URL: ep(modelURL), Body: body, Key: benchKey})
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(resp)))
		w.Write(resp)
	})
	ln, err := net.Listen("unix", filepath.Join(b.TempDir(), "bare.sock"))
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	srv.SetKeepAlivesEnabled(false)
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// benchKey has the length of a real API key (51 bytes), so the reflection
// scan takes its production path.
const benchKey = "sk-bench0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"

func sizeLabel(n int) string {
	if n >= 1<<20-256 {
		return "1MiB"
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchBroker serves a turn with a budget large enough for the run.
func benchBroker(b *testing.B, modelURL string) string {
	b.Helper()
	br, err := broker.New(broker.Config{
		ModelURL: ep(modelURL), Model: testModel, MaxCalls: rtsandbox.MaxCallsLimit,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return benchKey, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	// A budget of 1000 calls per turn: a fresh turn per 1000 iterations.
	sw := &turnSwitch{b: br, ctx: ctx}
	srv, err := broker.Listen(filepath.Join(dir, "b.sock"), sw, broker.ListenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return srv.Path()
}

// turnSwitch starts a new turn when the current one's budget is spent, so
// benchmarks can run past 1000 calls without measuring refusals.
type turnSwitch struct {
	b    *broker.Broker
	ctx  context.Context
	turn *broker.Turn
}

func (s *turnSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.turn == nil || s.turn.Remaining() == 0 {
		s.turn = s.b.Turn(s.ctx, rtsandbox.Binding{Channel: testChannel, Speaker: guest})
	}
	s.turn.ServeHTTP(w, r)
}

func post(b *testing.B, c *http.Client, url, body string, want int) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+wire.DummyKey)
	req.Header.Set("User-Agent", "")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	// Read the answer into memory as a worker must, sized by its length.
	data := make([]byte, resp.ContentLength)
	n, _ := io.ReadFull(resp.Body, data)
	resp.Body.Close()
	if resp.StatusCode != 200 || n != want {
		b.Fatalf("status %d, %d bytes; want 200, %d", resp.StatusCode, n, want)
	}
}

// reportP50 reports the median of d as the metric name.
func reportP50(b *testing.B, name string, d []time.Duration) {
	if len(d) > 0 {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), name)
	}
}

// measure runs fn b.N times and reports the p50 and p95 latencies.
func measure(b *testing.B, fn func()) {
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		fn()
		durs = append(durs, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(durs)
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(durs[len(durs)*95/100].Nanoseconds()), "p95-ns")
	}
}
