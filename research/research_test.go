package research

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/safefetch/safefetchtest"
	"github.com/rtsandbox/rtsandbox/search"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/upstream/endpointtest"
	"github.com/rtsandbox/rtsandbox/webpage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const publicName = "news.example.com"

// loopbackFetcher maps publicName to a public-looking address and
// connects to srv; production policy is untouched and no DNS query is
// ever made.
func loopbackFetcher(srv *httptest.Server) *safefetch.Fetcher {
	return safefetchtest.Loopback(srv, map[string]string{publicName: "93.184.216.34"})
}

func baseOptions(model string) Options {
	return Options{ModelURL: upstream.MustParseEndpoint(model, true), Model: "research-model",
		APIKey: func(context.Context) (rtsandbox.Secret, error) { return "host-key", nil }}
}

// The reference's tests, adapted: there is no host-tools mode, so search is always
// required and fetch_content needs Extract or FetchContent.
func TestConstructor(t *testing.T) {
	noSearch := search.Func(func(context.Context, string) (string, error) { return "", nil })
	o := baseOptions("http://127.0.0.1:1/v1/chat/completions")
	if _, err := New(o); err == nil {
		t.Error("New(base options) = nil error; want a refusal")
	}
	o.FetchContent = func(context.Context, string) (string, error) { return "", nil }
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "search") || !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("New(FetchContent, no search) = %v; want an error mentioning search", err)
	}
	o = baseOptions("http://127.0.0.1:1/v1/chat/completions")
	o.Search = noSearch
	if _, err := New(o); !errors.Is(err, ErrNeedFetch) {
		t.Errorf("New(search, no fetch) = %v; want ErrNeedFetch", err)
	}
	o.Extract = webpage.Extract
	if _, err := New(o); err != nil {
		t.Errorf("New(search, Extract) = %v; want no error", err)
	}
	for name, mod := range map[string]func(*Options){
		"no-model-url": func(o *Options) { o.ModelURL = upstream.Endpoint{} },
		"blank-model":  func(o *Options) { o.Model = " " },
		"model-calls":  func(o *Options) { o.MaxModelCalls = MaxMaxModelCalls + 1 },
		"tool-calls":   func(o *Options) { o.MaxToolCalls = -1 },
		"timeout-long": func(o *Options) { o.Timeout = MaxTimeout + 1 },
	} {
		o2 := o
		mod(&o2)
		if _, err := New(o2); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: New = %v; want ErrOptions", name, err)
		}
	}
}

// The reference's tests, adapted to our design: the fake model calls fetch_content, then
// an undeclared host_secret_tool, then answers with every tool result. The
// undeclared tool is refused, only the built-in tools run, and the scope
// wraps the whole run.
func TestOnlyResearchToolsRun(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	record := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, name)
	}
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: "host-key"},
		fakemodel.CallTools(fakemodel.Call(FetchContent, map[string]string{"url": "https://example.invalid/page"})),
		fakemodel.CallTools(fakemodel.Call("host_secret_tool", map[string]string{})),
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			var results []string
			for _, m := range req.Body.Messages {
				if m.Role == "tool" {
					results = append(results, m.Text())
				}
			}
			b, _ := json.Marshal(results)
			return fakemodel.Response{Content: "results=" + string(b)}
		}),
	)
	defer model.Close()
	o := baseOptions(model.ChatURL())
	o.Prompt = "LEGACY_PROMPT"
	o.Search = search.Func(func(context.Context, string) (string, error) { record(WebSearch); return "HOST web_search ran", nil })
	o.FetchContent = func(context.Context, string) (string, error) {
		record(FetchContent)
		return "HOST fetch_content ran", nil
	}
	var scope []string
	o.Scope = func(ctx context.Context, run func(context.Context) (string, error)) (string, error) {
		scope = append(scope, "in")
		defer func() { scope = append(scope, "out") }()
		return run(ctx)
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	report, err := w.Run(ctx, "Look it up")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Join(scope, ",") != "in,out" {
		t.Errorf("scope log = %v; want [in out]", scope)
	}
	if !strings.Contains(report, "HOST fetch_content ran") {
		t.Errorf("report %q lacks HOST fetch_content ran", report)
	}
	if strings.Contains(report, "HOST host_secret_tool") {
		t.Errorf("report %q shows the undeclared tool ran", report)
	}
	if !strings.Contains(report, "Tool host_secret_tool not found") {
		t.Errorf("report %q lacks the refusal of host_secret_tool", report)
	}
	if strings.Join(ran, ",") != FetchContent {
		t.Errorf("tools run = %v; want only fetch_content", ran)
	}
	reqs := model.Requests()
	if reqs[0].System() != "LEGACY_PROMPT" || reqs[0].UserText() != "Look it up" {
		t.Errorf("first request system %q user %q", reqs[0].System(), reqs[0].UserText())
	}
	for i, r := range reqs {
		var names []string
		for _, tl := range r.Body.Tools {
			names = append(names, tl.Function.Name)
		}
		if strings.Join(names, ",") != "web_search,fetch_content" {
			t.Errorf("request %d tools = %v; want exactly web_search, fetch_content", i, names)
		}
	}
}

// End to end: the model searches (loopback search server), fetches the
// first result through safefetch (the public-looking name is mapped to a
// loopback page server by the seams), and writes a report.
func TestEndToEnd(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != publicName {
			http.Error(w, "wrong host", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Otters</title><script>steal()</script></head>
<body><h1>Sea otters</h1><p>Otters hold hands while sleeping. <a href="/more">More</a></p></body></html>`)
	}))
	defer page.Close()
	searchSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"results":[{"title":"Otter facts","url":"http://%s/otters","content":"All about <b>otters</b>"}]}`, publicName)
	}))
	defer searchSrv.Close()
	backend, err := search.New(search.Config{Provider: search.SearXNG, URL: upstream.MustParseEndpoint(searchSrv.URL+"/search", true)})
	if err != nil {
		t.Fatal(err)
	}
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call(WebSearch, map[string]string{"query": "otters sleeping"})),
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			res, _ := req.ToolResult(req.Last().ToolCallID)
			if !strings.Contains(res, "Otter facts") {
				return fakemodel.Response{Content: "search result missing: " + res}
			}
			return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{
				fakemodel.Call(FetchContent, map[string]string{"url": "http://" + publicName + "/otters"}),
				fakemodel.Call(FetchContent, map[string]string{"url": "http://127.0.0.1:1/"}),
			}}
		}),
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			var results []string
			for _, m := range req.Body.Messages[len(req.Body.Messages)-2:] {
				results = append(results, m.Text())
			}
			return fakemodel.Response{Content: "  REPORT\n" + strings.Join(results, "\n---\n") + "\n  "}
		}),
	)
	defer model.Close()
	o := baseOptions(model.ChatURL())
	o.Search = backend
	o.Extract = webpage.Extract
	o.Fetcher = loopbackFetcher(page)
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	report, err := w.Run(context.Background(), "Do otters hold hands?")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, want := range []string{"REPORT", "Title: Otters", "Otters hold hands while sleeping. More [1]",
		"[1] http://news.example.com/more", "fetch_content failed: " + webpage.ErrFetchRefused.Error()} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "steal") || strings.HasSuffix(report, " ") {
		t.Errorf("report = %q; want scripts dropped and text trimmed", report)
	}
}

func TestReportTexts(t *testing.T) {
	long := strings.Repeat("é", MaxReportChars+5)
	for _, tc := range []struct {
		name    string
		steps   []fakemodel.Step
		want    string
		wantErr string
	}{
		{"empty", []fakemodel.Step{fakemodel.Reply("   ")}, "", EmptyAnswer},
		{"upstream-error", []fakemodel.Step{fakemodel.Status(500)}, "", "status not 2xx"},
		{"finish-error", []fakemodel.Step{fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Raw: []byte(`{"choices":[{"message":{"role":"assistant","content":"x"},"finish_reason":"error"}]}`)}
		})}, "", StoppedError},
		{"no-choices", []fakemodel.Step{fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Raw: []byte(`{"choices":[]}`)}
		})}, "", NoAssistant},
		{"cut", []fakemodel.Step{fakemodel.Reply(long)}, strings.Repeat("é", MaxReportChars) + "\n\n[report cut at 20000 characters]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := fakemodel.New(tc.steps...)
			defer model.Close()
			o := baseOptions(model.ChatURL())
			o.Search = search.Func(func(context.Context, string) (string, error) { return "", nil })
			o.Extract = webpage.Extract
			w, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.Run(context.Background(), "task")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Run error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Run = %d chars, %v; want %d chars", len(got), err, len(tc.want))
			}
		})
	}
}

func TestBudgetsAndDeadline(t *testing.T) {
	model := fakemodel.NewWithOptions(fakemodel.Options{Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if len(req.Body.Tools) == 0 {
				return fakemodel.Response{Content: "final without tools"}
			}
			return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call(WebSearch, map[string]string{"query": "q"})}}
		}))
	defer model.Close()
	var searches int
	o := baseOptions(model.ChatURL())
	o.Search = search.Func(func(context.Context, string) (string, error) { searches++; return "r", nil })
	o.Extract = webpage.Extract
	o.MaxModelCalls, o.MaxToolCalls = 4, 2
	w, _ := New(o)
	got, err := w.Run(context.Background(), "task")
	if err != nil || got != "final without tools" || searches != 2 || len(model.Requests()) != 4 {
		t.Errorf("Run = %q, %v; searches %d, model calls %d; want final answer, 2 searches, 4 calls", got, err, searches, len(model.Requests()))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Run(ctx, "task"); err == nil || err.Error() != DefaultAborted {
		t.Errorf("Run(cancelled) = %v; want %q", err, DefaultAborted)
	}
	slow := fakemodel.New(fakemodel.CallTools(fakemodel.Call(WebSearch, map[string]string{"query": "q"})))
	defer slow.Close()
	o2 := baseOptions(slow.ChatURL())
	o2.Search = search.Func(func(ctx context.Context, _ string) (string, error) { <-ctx.Done(); return "", ctx.Err() })
	o2.Extract = webpage.Extract
	o2.Aborted = "custom aborted"
	w2, _ := New(o2)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := w2.Run(ctx2, "task"); err == nil || err.Error() != "custom aborted" {
		t.Errorf("Run(deadline) = %v; want the aborted text", err)
	}
}

// fetchOnce is a model that calls fetch_content on url, then reports the
// tool result it read.
func fetchOnce(url string) *fakemodel.Server {
	return fakemodel.New(
		fakemodel.CallTools(fakemodel.Call(FetchContent, map[string]string{"url": url})),
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			res, _ := req.ToolResult(req.Last().ToolCallID)
			return fakemodel.Response{Content: "REPORT " + res}
		}),
	)
}

// A panic in the host's extraction is contained: the model reads the
// fixed text, the operator log gets the panic, and the run finishes.
func TestFetchPanicContained(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<p>x</p>")
	}))
	defer page.Close()
	for name, set := range map[string]func(*Options){
		"extract": func(o *Options) {
			o.Extract = func(context.Context, *safefetch.Result, int) (string, error) { panic("extractor bug") }
		},
		"fetch-content": func(o *Options) {
			o.FetchContent = func(context.Context, string) (string, error) { panic("extractor bug") }
		},
	} {
		t.Run(name, func(t *testing.T) {
			model := fetchOnce("http://" + publicName + "/")
			defer model.Close()
			var log bytes.Buffer
			o := baseOptions(model.ChatURL())
			o.Search = search.Func(func(context.Context, string) (string, error) { return "", nil })
			o.Fetcher = loopbackFetcher(page)
			o.Logger = slog.New(slog.NewJSONHandler(&log, nil))
			set(&o)
			w, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			report, err := w.Run(context.Background(), "task")
			if want := "REPORT Error: fetch_content failed: " + webpage.ErrFetchInternal.Error(); err != nil || report != want {
				t.Errorf("Run = %q, %v; want %q", report, err, want)
			}
			if !strings.Contains(log.String(), `"msg":"research tool panicked"`) || !strings.Contains(log.String(), "extractor bug") ||
				!strings.Contains(log.String(), "TestFetchPanicContained") {
				t.Errorf("log lacks the panic record:\n%s", log.String())
			}
		})
	}
}

// The web_fetch finding through research's fetch_content: a page that
// leaves <b> with thousands of attributes open across thousands of
// paragraphs (through html.Parse, 180 KB of it ran the host out of
// memory) is read within the extraction bounds.
func TestFetchFormattingElementAmplification(t *testing.T) {
	var b strings.Builder
	b.WriteString("<p><b")
	for i := 0; b.Len() < webpage.MaxParseBytes/3; i++ {
		fmt.Fprintf(&b, " a%d", i)
	}
	b.WriteString(">")
	for b.Len() < webpage.MaxParseBytes-4 {
		b.WriteString("<p>x")
	}
	body := b.String()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, body)
	}))
	defer page.Close()
	model := fetchOnce("http://" + publicName + "/")
	defer model.Close()
	o := baseOptions(model.ChatURL())
	o.Search = search.Func(func(context.Context, string) (string, error) { return "", nil })
	o.Extract = webpage.Extract
	o.Fetcher = loopbackFetcher(page)
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	report, err := w.Run(context.Background(), "task")
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil || !strings.HasPrefix(report, "REPORT URL: http://"+publicName+"/\n\nx\n\nx") || len(report) > MaxToolResultBytes+100 {
		t.Fatalf("Run = %.80q… (%d bytes), %v", report, len(report), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 || took > time.Second*raceTimeFactor {
		t.Errorf("Run over a %d KiB page allocated %.1f MiB in %v; want ≤ 64 MiB, ≤ %v",
			len(body)>>10, float64(alloc)/(1<<20), took, time.Second*raceTimeFactor)
	}
}

// The research worker's model endpoint refuses exactly what the one
// endpoint rule refuses: what the rule accepts, New takes; what it refuses
// never becomes an Endpoint, and New refuses the zero one.
func TestEndpointRuleRegression(t *testing.T) {
	endpointtest.Run(t, ErrOptions, func(e upstream.Endpoint) error {
		o := baseOptions("http://127.0.0.1:1/v1")
		o.ModelURL = e
		o.Search = search.Func(func(context.Context, string) (string, error) { return "", nil })
		o.Extract = webpage.Extract
		_, err := New(o)
		return err
	})
}
