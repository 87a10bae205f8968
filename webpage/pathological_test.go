package webpage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/safefetch"
)

// Bounds of extracting any page of up to MaxParseBytes (the finding: a
// 43 KB page took 482 MB and 2.2 s through html.Parse, 180 KB ran the host
// out of memory). Allocation is the total allocated during the call, an
// upper bound of the heap's growth whatever the collector does. Time is
// the process's CPU time (wall time where it is not measured), so a loaded
// machine does not fail the bound. Under the race detector the time bound
// is multiplied by raceTimeFactor (race_test.go); allocation is the same
// Go heap and is not scaled.
const (
	maxExtractAlloc = 64 << 20
	maxExtractTime  = time.Second
)

// family generates pathological markup of one kind, at most n bytes.
type family struct {
	name string
	gen  func(n int) string
}

// fill returns head, then unit repeated, then tail, at most n bytes
// (head and tail always whole).
func fill(n int, head, unit, tail string) string {
	k := max(0, (n-len(head)-len(tail))/max(1, len(unit)))
	return head + strings.Repeat(unit, k) + tail
}

// fillFunc is fill with the i-th unit given by unit(i).
func fillFunc(n int, head string, unit func(i int) string, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	for i := 0; ; i++ {
		u := unit(i)
		if b.Len()+len(u)+len(tail) > n {
			break
		}
		b.WriteString(u)
	}
	b.WriteString(tail)
	return b.String()
}

// distinctAttrs returns attributes " a0 a1 …" of distinct names, about n
// bytes.
func distinctAttrs(n int) string {
	return fillFunc(n, "", func(i int) string { return " " + strconv.FormatInt(int64(i), 36) }, "")
}

// attrsN returns n attributes " a0 a1 …" of distinct names.
func attrsN(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(" " + strconv.FormatInt(int64(i), 36))
	}
	return b.String()
}

// shortAttrs returns n ≤ 65 attributes of distinct one-byte names.
func shortAttrs(n int) string {
	const names = "=abcdefghijklmnopqrstuvwxyz0123456789!#$%&()*+,-.:;?@[]^_`{|}~\"'<"
	var b strings.Builder
	for _, c := range []byte(names[:n]) {
		b.WriteString(" " + string(c))
	}
	return b.String()
}

// families are the pathological markup families; each holds at n =
// MaxParseBytes to the bounds above.
var families = []family{
	// The finding: a formatting element with thousands of attributes left
	// open across thousands of paragraphs. A tree builder copies it into
	// each one.
	{"reconstruct-b", func(n int) string { return fill(n, "<p><b"+distinctAttrs(n/2)+">", "<p>x", "") }},
	{"reconstruct-a", func(n int) string {
		return fill(n, `<p><a href="/x"`+distinctAttrs(n/2)+">", "<p>x", "")
	}},
	{"reconstruct-font", func(n int) string {
		return fill(n, "<p><font"+strings.Repeat(` color="red"`, 4000)+">", "<p>x</p>", "")
	}},
	{"reconstruct-many", func(n int) string { return fill(n, "<p>"+strings.Repeat("<b x=1><i y=2><u z=3>", 1000), "<p>x", "") }},
	{"nest-div", func(n int) string { return fill(n, "", "<div>", "x") }},
	{"nest-span", func(n int) string { return fill(n, "<div>", "<span>", "x") }},
	{"nest-hidden", func(n int) string { return fill(n, "", "<div hidden><span>", "x") }},
	{"nest-blockquote-p", func(n int) string { return fill(n, "", "<blockquote><p>x", "") }},
	{"nest-li", func(n int) string { return fill(n, "", "<ul><li>x", "") }},
	{"nest-scope-walk", func(n int) string {
		return fill(n, "<p><button>"+strings.Repeat("<span>", maxDepth), "<div>", "")
	}},
	{"end-tags-unmatched", func(n int) string { return fill(n, "<div>"+strings.Repeat("<i>", maxDepth), "</x>", "") }},
	{"table-unclosed", func(n int) string { return fill(n, "", "<table>", "x") }},
	{"table-foster-text", func(n int) string { return fill(n, "<table>", "x<tr>", "") }},
	{"table-cells", func(n int) string { return fill(n, "<table><tr>", "<td>x", "") }},
	{"table-nested-cells", func(n int) string { return fill(n, "", "<table><tr><td>x", "") }},
	{"attr-value-huge", func(n int) string {
		return `<a href="/` + strings.Repeat("a", n/5) + `">x</a><div style="` + strings.Repeat("color:red;", n/50) +
			`">y</div><img alt="` + strings.Repeat("z ", n/10) + `"><p title='` + strings.Repeat("&amp;", n/25) + `'>`
	}},
	{"attr-value-unquoted", func(n int) string { return fill(n, "<p title=", "a", ">x") }},
	{"attr-count-distinct", func(n int) string { return "<b" + distinctAttrs(n-8) + ">x" }},
	// One tag with a million attributes.
	{"attr-count-same", func(n int) string { return fill(n, "<b", " a", ">x") }},
	{"attr-count-slash", func(n int) string { return fill(n, "<b", "/a", ">x") }},
	{"attr-count-end-tag", func(n int) string { return "<b>x</b" + distinctAttrs(n-8) + ">" }},
	{"attr-count-many-tags", func(n int) string { return fill(n, "", "<b"+distinctAttrs(4096)+">x", "") }},
	// Tags at the cap, in the fewest bytes: what the Tokenizer still
	// spends per attribute, a million of them. Distinct names cost the
	// most (each is kept, and read).
	{"attr-64-per-tag", func(n int) string { return fill(n, "", "<b"+shortAttrs(maxTagAttrs)+">", "") }},
	{"attr-64-same-per-tag", func(n int) string { return fill(n, "", "<b"+strings.Repeat(" a", maxTagAttrs)+">", "") }},
	{"attr-64-per-end-tag", func(n int) string { return fill(n, "", "</b"+shortAttrs(maxTagAttrs)+">", "") }},
	{"attr-65-per-tag", func(n int) string { return fill(n, "", "<b"+shortAttrs(maxTagAttrs+1)+">", "") }},
	// Where the Tokenizer reads a tag that a cap following one tag at a
	// time would take for a quoted value: after a quote opened in a
	// script's or a comment's pseudo-tag, or after "=" that begins a name.
	{"attr-count-after-script-quote", func(n int) string {
		return `<script><x y="</script><b` + distinctAttrs(n-40) + `>"`
	}},
	{"attr-count-after-comment-quote", func(n int) string { return `<!--<x y="--><b` + distinctAttrs(n-40) + `>"` }},
	{"attr-count-after-eq-name", func(n int) string { return `<i ="></i><b` + distinctAttrs(n-40) + `>"` }},
	{"attr-count-raw-end-tag", func(n int) string { return `<script><x </script =" ` + distinctAttrs(n-40) + `>"` }},
	// The pre-pass's own worst case: a tag starting inside another's
	// name or value at every few bytes, several followed at once.
	{"tags-overlapping", func(n int) string { return fill(n, "", "<a=a/", "") }},
	{"tags-in-values", func(n int) string { return fill(n, "", `<a b="<c d='<e f=g>`, "") }},
	{"attr-style-many", func(n int) string { return fill(n, "", `<i style="`+strings.Repeat("a: b; ", 100)+`">x`, "") }},
	{"entity-amp", func(n int) string { return fill(n, "<p>", "&amp;", "") }},
	{"entity-numeric", func(n int) string { return fill(n, "<p>", "&#x1F600;&#128512;", "") }},
	{"entity-prefix", func(n int) string { return fill(n, "<p>", "&notit", "") }},
	{"entity-long-name", func(n int) string { return fill(n, "<p>&", "a", "") }},
	{"entity-in-href", func(n int) string { return fill(n, "", `<a href="/?a=1&copy=2&amp;&notit;&#65;">x</a>`, "") }},
	{"comment-long", func(n int) string { return fill(n, "<!--", "x", "") }},
	{"comment-dashes", func(n int) string { return fill(n, "<!--", "-!", "") }},
	{"comments-many", func(n int) string { return fill(n, "", "<!---->", "") }},
	{"cdata-long", func(n int) string { return fill(n, "<![CDATA[", "x", "") }},
	{"script-long", func(n int) string { return fill(n, "<script>", "<!--<script>x", "") }},
	{"script-many", func(n int) string { return fill(n, "", "<script>x</script>", "") }},
	{"raw-unclosed", func(n int) string { return fill(n, "<style>", "</styl", "") }},
	{"links-distinct", func(n int) string {
		return fillFunc(n, "", func(i int) string { return `<a href="/` + strconv.Itoa(i) + `">x</a>` }, "")
	}},
	{"links-empty-distinct", func(n int) string {
		return fillFunc(n, "", func(i int) string { return `<a href="/` + strconv.Itoa(i) + `"></a>` }, "")
	}},
	{"links-same", func(n int) string { return fill(n, "", `<a href="/x">x</a>`, "") }},
	{"links-javascript", func(n int) string { return fill(n, "", `<a href="javascript:x">x</a>`, "") }},
	{"links-long-href", func(n int) string { return fill(n, "", `<a href="/`+strings.Repeat("a", 3000)+`"></a>`, "") }},
	{"links-nested", func(n int) string { return fill(n, "", `<a href="/x"><div>`, "") }},
	{"text-words", func(n int) string { return fill(n, "", "a ", "") }},
	{"text-one-word", func(n int) string { return fill(n, "", "a", "") }},
	{"text-spaces", func(n int) string { return fill(n, "", " ", "x") }},
	{"text-controls", func(n int) string { return fill(n, "", "\x01\u00ad\ufeff", "x") }},
	{"pre-spaces", func(n int) string { return fill(n, "<pre>", " ", "x") }},
	{"pre-lines", func(n int) string { return fill(n, "<pre>", "\n", "x") }},
	{"head-flood", func(n int) string { return fill(n, "<head>", `<meta name="a" content="b">`, "") }},
	{"svg-self-closing", func(n int) string { return fill(n, "<svg>", "<path d=1/>", "") }},
	{"titles-many", func(n int) string { return fill(n, "", "<title>t</title>", "") }},
	{"tags-tiny", func(n int) string { return fill(n, "", "<a>", "") }},
}

// measure runs fn once and returns the bytes it allocated and the CPU
// time it took (wall time where CPU time is not measured).
func measure(fn func()) (alloc uint64, took time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, ok := processCPU()
	start := time.Now()
	fn()
	took = time.Since(start)
	if cpu1, _ := processCPU(); ok {
		took = cpu1 - cpu0
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

func htmlResult(page string) *safefetch.Result {
	return &safefetch.Result{URL: "https://base.example/p", Status: 200,
		Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}}, Body: []byte(page)}
}

// checkOutput fails unless out is bounded, valid text.
func checkOutput(t *testing.T, out string, err error) {
	t.Helper()
	if err != nil || len(out) > MaxExtractBytes || !utf8.ValidString(out) {
		t.Fatalf("Extract = %d bytes (valid UTF-8 %v), %v", len(out), utf8.ValidString(out), err)
	}
}

// Every family at MaxParseBytes is extracted within the allocation and
// time bounds.
func TestExtractPathological(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			page := f.gen(MaxParseBytes)
			if len(page) > MaxParseBytes || len(page) < MaxParseBytes/2 {
				t.Fatalf("generated %d bytes; want about %d", len(page), MaxParseBytes)
			}
			res := htmlResult(page)
			var out string
			var err error
			alloc, took := measure(func() { out, err = Extract(context.Background(), res, 0) })
			checkOutput(t, out, err)
			if alloc > maxExtractAlloc || took > maxExtractTime*raceTimeFactor {
				t.Errorf("%s: %d KiB page: allocated %.1f MiB in %v; want ≤ %d MiB, ≤ %v",
					f.name, len(page)>>10, float64(alloc)/(1<<20), took, maxExtractAlloc>>20, maxExtractTime*raceTimeFactor)
			}
			t.Logf("%s: %.1f MiB allocated, %v CPU", f.name, float64(alloc)/(1<<20), took)
		})
	}
}

// The finding's own page through the removed tree builder's path still
// reads as text: the paragraphs and the formatting element's content.
func TestExtractFormattingElementText(t *testing.T) {
	page := "<p><b" + distinctAttrs(2000) + ">bold" + strings.Repeat("<p>x", 3)
	_, text, _, err := ExtractHTML(context.Background(), []byte(page), "https://base.example/")
	if err != nil || text != "bold\n\nx\n\nx\n\nx" {
		t.Errorf("ExtractHTML = %q, %v", text, err)
	}
}

// countdownCtx is a context whose Err reports Canceled from its n-th call
// on; it counts the calls.
type countdownCtx struct {
	context.Context
	n     int64
	calls atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.calls.Add(1) >= c.n {
		return context.Canceled
	}
	return nil
}

// Extraction looks at its context every checkEvery tokens and stops at
// once when it has ended.
func TestExtractStopsWhenContextEnds(t *testing.T) {
	page := []byte(fill(MaxParseBytes, "", "<a>", ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := ExtractHTML(ctx, page, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("ExtractHTML(cancelled) = %v; want Canceled", err)
	}
	out, err := Extract(ctx, htmlResult(string(page)), 0)
	var fe *FetchError
	if out != "" || !errors.As(err, &fe) || fe.Class != ErrFetchNetwork || !errors.Is(err, context.Canceled) {
		t.Errorf("Extract(cancelled) = %q, %v; want ErrFetchNetwork caused by Canceled", out, err)
	}

	// Cancelled midway: the very next look stops it.
	cd := &countdownCtx{Context: context.Background(), n: 10}
	_, _, _, err = ExtractHTML(cd, page, "")
	if !errors.Is(err, context.Canceled) || cd.calls.Load() != 10 {
		t.Errorf("ExtractHTML(cancelled midway) = %v after %d looks; want Canceled after 10", err, cd.calls.Load())
	}

	// A real deadline stops a real extraction promptly.
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	start := time.Now()
	if _, _, _, err := ExtractHTML(ctx, page, ""); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 50*time.Millisecond*raceTimeFactor {
		t.Errorf("ExtractHTML(past deadline) = %v in %v", err, time.Since(start))
	}
}

// A panic in page handling becomes ErrFetchInternal with the panic as its
// cause, and the process goes on.
func TestContain(t *testing.T) {
	text, err := Contain(func() (string, error) { panic("boom") })
	pe, ok := errors.AsType[*PanicError](err)
	if text != "" || !errors.Is(err, ErrFetchInternal) || !ok || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("Contain(panic) = %q, %v", text, err)
	}
	if err.Error() != ErrFetchInternal.Error() || err.Error() != "the page could not be read" {
		t.Errorf("error text = %q; want the fixed class text", err)
	}
	var nilPanic *PanicError
	_, err = Contain(func() (string, error) { return strings.Fields("")[0], nil })
	if !errors.As(err, &nilPanic) {
		t.Errorf("Contain(runtime error) = %v", err)
	}
	if text, err := Contain(func() (string, error) { return "ok", nil }); text != "ok" || err != nil {
		t.Errorf("Contain(ok) = %q, %v", text, err)
	}
}

// BenchmarkExtractPathological extracts each family at MaxParseBytes. It
// reports the process CPU time per extraction, the allocation per
// extraction (an upper bound of heap growth) and the peak of the heap above
// its level before the run, sampled every 100 µs during one extra run.
func BenchmarkExtractPathological(b *testing.B) {
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			res := htmlResult(f.gen(MaxParseBytes))
			peak := peakHeap(func() { Extract(context.Background(), res, 0) })
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0, _ := processCPU()
			for b.Loop() {
				if _, err := Extract(context.Background(), res, 0); err != nil {
					b.Fatal(err)
				}
			}
			cpu1, ok := processCPU()
			runtime.ReadMemStats(&after)
			if ok {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
			}
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "alloc-MiB/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// peakHeap runs fn and returns the highest heap object bytes seen above
// the level before it, sampled every 100 µs.
func peakHeap(fn func()) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := read()
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			if v := read(); v > base && v-base > peak.Load() {
				peak.Store(v - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	if v := read(); v > base && v-base > peak.Load() {
		peak.Store(v - base)
	}
	return peak.Load()
}

func ExampleExtractHTML() {
	title, text, links, _ := ExtractHTML(context.Background(),
		[]byte(`<title>Otters</title><p>Otters <b>hold hands</b>. <a href="/more">More</a><script>x()</script>`),
		"https://example.com/otters")
	fmt.Printf("%s\n%s\n%v\n", title, text, links)
	// Output:
	// Otters
	// Otters hold hands. More [1]
	// [https://example.com/more]
}
