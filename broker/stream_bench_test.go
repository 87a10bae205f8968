package broker_test

import (
	"cmp"
	"context"
	"io"
	"net"
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
	"github.com/rtsandbox/rtsandbox/wire"
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
		name    string
		answer  []string
		request string // streamBody when empty
	}
	var cases []streamCase
	for _, evSize := range []int{256, 4 << 10} {
		cases = append(cases, streamCase{"1MiB-events-" + sizeName(evSize), benchStream(1<<20, evSize), ""})
	}
	// The escape-dense corpora, whose events the scanner also checks
	// decoded (event mode); markdown also in events of the size a model
	// sends (a few tokens each).
	for _, kind := range answercorpus.Kinds()[1:] {
		cases = append(cases, streamCase{string(kind) + "-1MiB-events-4KiB", answercorpus.Events(kind, 1<<20, 4<<10), ""})
	}
	cases = append(cases, streamCase{"markdown-1MiB-events-256B", answercorpus.Events(answercorpus.Markdown, 1<<20, 256), ""})
	// A session's request carries the conversation: the broker rebuilds
	// it before the upstream call, on the first byte's path.
	cases = append(cases, streamCase{"markdown-1MiB-events-4KiB-request-200KiB", answercorpus.Events(answercorpus.Markdown, 1<<20, 4<<10), conversationRequest(200 << 10)})
	for _, c := range cases {
		answer := c.answer
		srv := eventServer(answer, firstGap)
		want := len(strings.Join(answer, ""))
		request := cmp.Or(c.request, streamBody)
		b.Run(c.name, func(b *testing.B) {
			direct := &http.Client{Transport: upstream.NewTransport()}
			defer direct.CloseIdleConnections()
			via := socketClient(streamBenchBroker(b, srv.URL))
			brokerURL := "http://" + wire.BrokerHost + wire.RouteAnthropicMessages
			var d, v, added streamTimes
			for b.Loop() {
				dt, dd := streamCall(b, direct, srv.URL+"/v1/messages", request, want)
				vt, vd := streamCall(b, via, brokerURL, request, want)
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

// eventServer is a loopback upstream that answers every call with the
// events of answer, flushing each, after a pause of firstGap behind the
// first (a model's time to its first token).
func eventServer(answer []string, firstGap time.Duration) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
}

// BenchmarkStreamedRelayFloor measures what relaying a streamed answer
// costs at all, against what the broker's checks add to it: a bare relay
// on a Unix socket (it forwards the request and copies the answer with a
// flush per read and Connection: close, as the broker must, and checks
// nothing) beside the broker, each alternated with the direct call. It
// reports the p50 of what each adds (bare-added-…, broker-added-…) for
// the 1 MiB markdown stream in 4 KiB events.
func BenchmarkStreamedRelayFloor(b *testing.B) {
	answer := answercorpus.Events(answercorpus.Markdown, 1<<20, 4<<10)
	srv := eventServer(answer, 2*time.Millisecond)
	defer srv.Close()
	want := len(strings.Join(answer, ""))
	direct := &http.Client{Transport: upstream.NewTransport()}
	defer direct.CloseIdleConnections()
	bare := socketClient(bareRelay(b, srv.URL+"/v1/messages"))
	via := socketClient(streamBenchBroker(b, srv.URL))
	brokerURL := "http://" + wire.BrokerHost + wire.RouteAnthropicMessages
	var bareAdded, brokerAdded streamTimes
	for b.Loop() {
		dt, dd := streamCall(b, direct, srv.URL+"/v1/messages", streamBody, want)
		bt, bd := streamCall(b, bare, brokerURL, streamBody, want)
		vt, vd := streamCall(b, via, brokerURL, streamBody, want)
		bareAdded.add(bt-dt, bd-dd)
		brokerAdded.add(vt-dt, vd-dd)
	}
	bareAdded.report(b, "bare-added-")
	brokerAdded.report(b, "broker-added-")
}

// bareRelay serves, on a Unix socket it returns the path of, a relay of
// every request to target that checks nothing.
func bareRelay(b *testing.B, target string) string {
	b.Helper()
	up := &http.Client{Transport: upstream.NewTransport()}
	b.Cleanup(up.CloseIdleConnections)
	path := filepath.Join(b.TempDir(), "bare.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target, r.Body)
		req.Header.Set("Content-Type", "application/json")
		resp, err := up.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.Header().Set("Connection", "close")
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return path
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

// benchStream is an Anthropic event stream of about size bytes: a
// message_start, text deltas of ordinary prose of about evSize bytes each,
// and the closing events.
func benchStream(size, evSize int) []string {
	prose := "The sealed worker answered the guest's question with care. "
	evs := []string{answercorpus.MessageStart}
	head := `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`
	tail := "\"}}\n\n"
	text := strings.Repeat(prose, evSize/len(prose)+1)[:max(evSize-len(head)-len(tail), 1)]
	ev := head + text + tail
	for total := len(evs[0]); total+len(ev) < size; total += len(ev) {
		evs = append(evs, ev)
	}
	return append(evs, answercorpus.EndEvents()...)
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

// streamCall posts the streamed request body and returns the time to the
// first body byte and to the end of the answer.
func streamCall(b *testing.B, c *http.Client, url, body string, want int) (first, total time.Duration) {
	buf := make([]byte, 64<<10)
	start := time.Now()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+wire.DummyKey)
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

// conversationRequest is a streamed Messages request of about size bytes
// whose messages alternate user and assistant text blocks of markdown
// (answercorpus), about 4 KiB each, the last from the user: what a
// session worker sends once its conversation has grown.
func conversationRequest(size int) string {
	var msgs []string
	var text strings.Builder
	role := "user"
	for _, p := range answercorpus.Stream(answercorpus.Markdown, size) {
		if text.WriteString(p); text.Len() < 4<<10 {
			continue
		}
		msgs = append(msgs, `{"role":"`+role+`","content":[{"type":"text","text":"`+text.String()+`"}]}`)
		text.Reset()
		role = map[string]string{"user": "assistant", "assistant": "user"}[role]
	}
	if role == "user" { // the last one came from the assistant: end with a user's
		msgs = append(msgs, `{"role":"user","content":"Go on."}`)
	}
	return `{"stream":true,"max_tokens":100,"messages":[` + strings.Join(msgs, ",") + `]}`
}
