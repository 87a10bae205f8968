package broker_test

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
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
				b.Run(dialect+"/"+c.name+"/"+s.name, func(b *testing.B) {
					var f *sessFixture
					if dialect == "OpenAI" {
						f = openaiSession(b)
					} else {
						f = newSession(b, sessOptions{})
					}
					f.bind("")
					body := c.body(flood(s.name, size))
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
