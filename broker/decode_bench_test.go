package broker_test

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/heappeak"
	"github.com/rtsandbox/rtsandbox/wire"
)

// BenchmarkDecodeShapes sends one body of every adversarial shape to
// every position of the session routes (decode_test.go), of
// RTSANDBOX_BENCH_MB MiB (default 16), and reports per call what the
// process allocated per body byte (alloc/byte) and the CPU it used
// (cpu-ms), beside the wall time. docs/benchmarks.md records it before
// and after issue 21.
func BenchmarkDecodeShapes(b *testing.B) {
	size := 16 << 20
	if mb, err := strconv.Atoi(os.Getenv("RTSANDBOX_BENCH_MB")); err == nil {
		size = mb << 20
	}
	routes := map[string][]routeCase{"Anthropic": messagesRoutes, "OpenAI": chatRoutes}
	for _, dialect := range []string{"OpenAI", "Anthropic"} {
		for _, c := range routes[dialect] {
			for _, s := range shapes {
				b.Run(dialect+"/"+c.name+"/"+s.Name, func(b *testing.B) {
					var f *sessFixture
					if dialect == "OpenAI" {
						f = openaiSession(b)
					} else {
						f = newSession(b, sessOptions{})
					}
					f.bind("")
					body := c.body(flood(s.Name, size))
					var alloc uint64
					var cpu time.Duration
					for b.Loop() {
						runtime.GC()
						c0 := benchCPU()
						alloc += allocated(func() { f.post(c.route, body) })
						cpu += benchCPU() - c0
					}
					b.ReportMetric(float64(alloc)/float64(b.N)/float64(len(body)), "alloc/byte")
					b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms")
				})
			}
		}
	}
}

// benchCPU is the process's user and system CPU so far.
func benchCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodePeak measures what one call holds at its peak, per byte
// of its body (peak/byte): the Go heap sampled every millisecond while
// the call runs, with the collector run at 5 % growth so that the heap
// is about what is live. The bodies are 64 MiB of one string, the shape
// that is kept and rebuilt (accepted, sent to an upstream that is down),
// and one flood the rules refuse. It is the measure behind
// rtsandbox.DecodeFactor.
func BenchmarkDecodePeak(b *testing.B) {
	big := `"` + strings.Repeat("a", 64<<20) + `"`
	cases := []struct{ name, route, body string }{
		{"MessagesText", wire.RouteAnthropicMessages, `{"messages":[{"role":"user","content":` + big + `}]}`},
		{"ToolUseInput", wire.RouteAnthropicMessages, messagesRoutes[2].body(`[` + big + `]`)},
		{"ToolInput", "/tools/recall", `{"input":{"x":` + big + `}}`},
		{"MCPArguments", "/mcp/research", rpcBody(wire.MCPMethodCall, `{"name":"search","arguments":{"x":`+big+`}}`)},
		{"RefusedFlood", wire.RouteAnthropicMessages, `{"messages":` + flood("EmptyArrays", 64<<20) + `}`},
	}
	f := newSession(b, sessOptions{broker: func(c *broker.Config) {
		c.ModelURL = ep("https://127.0.0.1:9") // down: the rebuilt request is made, never answered
		c.MCP[0].URL = ep("https://127.0.0.1:9/mcp")
	}})
	f.bind("")
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			var worst float64
			for b.Loop() {
				worst = max(worst, heappeak.Of(func() { f.postReader(c.route, bytes.NewReader(body), int64(len(body))) })/float64(len(body)))
			}
			b.ReportMetric(worst, "peak/byte")
		})
	}
}
