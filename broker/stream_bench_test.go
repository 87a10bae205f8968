package broker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BenchmarkStreamedAnswer compares a streamed 1 MiB Anthropic Messages
// answer read directly from a loopback upstream and read through the
// broker on a Unix socket (Messages normalisation, key lookup, the relay
// with its carry-window reflection filter, the SSE watcher and usage
// count, a flush per piece). Each iteration makes one direct call and one
// through the broker, alternating, so that both see the same machine load;
// it reports the p50 of the time to the first body byte and to the end of
// the answer for each (direct-ttfb-p50-ns, broker-ttfb-p50-ns, …) and the
// p50 of the per-iteration differences (added-ttfb-p50-ns,
// added-total-p50-ns). The upstream sends message_start, pauses
// firstGap (a model's time to its first token), then content_block_delta
// events of evSize bytes back to back, flushing each.
func BenchmarkStreamedAnswer(b *testing.B) {
	const firstGap = 2 * time.Millisecond
	type streamCase struct {
		name   string
		answer []string
	}
	var cases []streamCase
	for _, evSize := range []int{256, 4 << 10} {
		cases = append(cases, streamCase{"1MiB-events-" + sizeName(evSize), benchStream(1<<20, evSize)})
	}
	// The escape-dense corpora, whose events the scanner also checks
	// decoded (event mode).
	for _, kind := range answercorpus.Kinds()[1:] {
		cases = append(cases, streamCase{string(kind) + "-1MiB-events-4KiB", corpusStream(kind, 1<<20, 4<<10)})
	}
	for _, c := range cases {
		answer := c.answer
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			rc := http.NewResponseController(w)
			for i, ev := range answer {
				io.WriteString(w, ev)
				rc.Flush()
				if i == 0 {
					time.Sleep(firstGap)
				}
			}
		}))
		want := len(strings.Join(answer, ""))
		b.Run(c.name, func(b *testing.B) {
			direct := &http.Client{Transport: upstream.NewTransport()}
			defer direct.CloseIdleConnections()
			via := socketClient(streamBenchBroker(b, srv.URL))
			brokerURL := "http://" + rtsandbox.BrokerHost + rtsandbox.RouteAnthropicMessages
			var d, v, added streamTimes
			for b.Loop() {
				dt, dd := streamCall(b, direct, srv.URL+"/v1/messages", want)
				vt, vd := streamCall(b, via, brokerURL, want)
				d.add(dt, dd)
				v.add(vt, vd)
				added.add(vt-dt, vd-dd)
			}
			d.report(b, "direct-")
			v.report(b, "broker-")
			added.report(b, "added-")
		})
		srv.Close()
	}
}

// streamTimes collects the time to first byte and the total of calls.
type streamTimes struct{ first, total []time.Duration }

func (s *streamTimes) add(first, total time.Duration) {
	s.first = append(s.first, first)
	s.total = append(s.total, total)
}

func (s *streamTimes) report(b *testing.B, prefix string) {
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"ttfb", s.first}, {"total", s.total}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Nanoseconds()), prefix+m.name+"-p50-ns")
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// benchMessageStart opens the benchmarks' event streams.
const benchMessageStart = `event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}` + "\n\n"

// benchStream is an Anthropic event stream of about size bytes: a
// message_start, text deltas of ordinary prose of about evSize bytes each,
// and the closing events.
func benchStream(size, evSize int) []string {
	prose := "The sealed worker answered the guest's question with care. "
	evs := []string{benchMessageStart}
	head := `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`
	tail := "\"}}\n\n"
	text := strings.Repeat(prose, evSize/len(prose)+1)[:max(evSize-len(head)-len(tail), 1)]
	ev := head + text + tail
	for total := len(evs[0]); total+len(ev) < size; total += len(ev) {
		evs = append(evs, ev)
	}
	return append(evs, `event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1000}}`+"\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

// corpusStream is an Anthropic event stream of about size bytes whose
// deltas carry an answer corpus (answercorpus.Stream), about evSize
// bytes an event: text deltas, or input_json_delta for tool calls.
func corpusStream(kind answercorpus.Kind, size, evSize int) []string {
	typ, field := "text_delta", "text"
	if kind == answercorpus.ToolCalls {
		typ, field = "input_json_delta", "partial_json"
	}
	evs := []string{benchMessageStart}
	head := `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"` + typ + `","` + field + `":"`
	tail := "\"}}\n\n"
	total := len(evs[0])
	var text strings.Builder
	for _, p := range answercorpus.Stream(kind, size) {
		text.WriteString(p)
		if len(head)+text.Len()+len(tail) < evSize {
			continue
		}
		ev := head + text.String() + tail
		if total+len(ev) > size {
			break
		}
		evs = append(evs, ev)
		total += len(ev)
		text.Reset()
	}
	return append(evs, `event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1000}}`+"\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

func streamBenchBroker(b *testing.B, base string) string {
	b.Helper()
	br, err := broker.New(broker.Config{
		ModelURL: ep(base), Model: testModel, MaxCalls: rtsandbox.MaxCallsLimit,
		API: rtsandbox.ModelAPIAnthropic, Stream: true,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return benchKey, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv, err := broker.Listen(filepath.Join(b.TempDir(), "b.sock"), &turnSwitch{b: br, ctx: ctx}, broker.ListenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return srv.Path()
}

// streamCall posts a streamed request and returns the time to the first
// body byte and to the end of the answer.
func streamCall(b *testing.B, c *http.Client, url string, want int) (first, total time.Duration) {
	buf := make([]byte, 64<<10)
	start := time.Now()
	req, _ := http.NewRequest("POST", url, strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+rtsandbox.DummyKey)
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := resp.Body.Read(buf)
	first = time.Since(start)
	for err == nil {
		var m int
		m, err = resp.Body.Read(buf)
		n += m
	}
	total = time.Since(start)
	if resp.StatusCode != 200 || err != io.EOF || n != want {
		b.Fatalf("status %d, %d bytes, %v; want 200, %d", resp.StatusCode, n, err, want)
	}
	return first, total
}
