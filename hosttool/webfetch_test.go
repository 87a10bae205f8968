package hosttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

var extractCases = []struct {
	name, html, text string
	links            []string
}{
	{"paragraphs", `<p>One  two
three</p><p>Four</p>`, "One two three\n\nFour", nil},
	{"scripts-styles-dropped", `<style>p{}</style><p>Hi<script>alert(1)</script> there</p><template>T</template><noscript>N</noscript>`, "Hi there", nil},
	{"hidden-dropped", `<div hidden>A</div><div aria-hidden="true">B</div><div style="display: none">C</div><span style="visibility:hidden">D</span><input type="hidden" value="E"><p>F</p>`, "F", nil},
	{"headings-lists", `<h2>Title</h2><ul><li>a</li><li>b <b>bold</b></li></ul>`, "## Title\n\n- a\n- b bold", nil},
	{"links-footnoted", `<p>See <a href="/x">this</a> and <a href="https://o.example/y#frag">that</a> and <a href="/x">again</a>.</p><a href="javascript:alert(1)">js</a> <a href="#top">top</a>`,
		"See this [1] and that [2] and again [1].\n\njs top", []string{"https://base.example/x", "https://o.example/y"}},
	{"link-credentials-dropped", `<a href="https://u:p@h.example/">h</a>`, "h [1]", []string{"https://h.example/"}},
	{"br-and-pre", "a<br>b<pre>  x\n    y\n</pre>c", "a\nb\n\n  x\n    y\n\nc", nil},
	{"table", `<table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>`, "k | v\n1 | 2", nil},
	{"head-title-only", `<html><head><title> The  page </title><meta name="x" content="y"></head><body>Body</body></html>`, "Body", nil},
	{"entities-controls", "<p>&lt;b&gt; &amp; \x01x</p>", "<b> & x", nil},
	{"image-alt", `<p><img src="a.png" alt="A cat"> text</p>`, "[image: A cat] text", nil},
}

func TestExtractHTML(t *testing.T) {
	for _, tc := range extractCases {
		t.Run(tc.name, func(t *testing.T) {
			_, text, links := ExtractHTML([]byte(tc.html), "https://base.example/dir/page")
			if text != tc.text {
				t.Errorf("ExtractHTML(%q) text = %q; want %q", tc.html, text, tc.text)
			}
			if strings.Join(links, " ") != strings.Join(tc.links, " ") {
				t.Errorf("ExtractHTML(%q) links = %q; want %q", tc.html, links, tc.links)
			}
		})
	}
	title, _, _ := ExtractHTML([]byte(`<title> The  page </title>`), "")
	if title != "The page" {
		t.Errorf("title = %q; want %q", title, "The page")
	}
}

func result(ct, body string) *safefetch.Result {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &safefetch.Result{URL: "https://base.example/p", Status: 200, Header: h, Body: []byte(body)}
}

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body, want string
		err                  error
	}{
		{"html", "text/html; charset=utf-8", `<title>T</title><p>Hi <a href="/a">a</a></p>`, "URL: https://base.example/p\nTitle: T\n\nHi a [1]\n\nLinks:\n[1] https://base.example/a", nil},
		{"plain", "text/plain", "line1\r\nline2\x00", "URL: https://base.example/p\n\nline1\nline2", nil},
		{"json", "application/json", `{"a":1}`, "URL: https://base.example/p\n\n{\"a\":1}", nil},
		{"problem-json", "application/problem+json", `{}`, "URL: https://base.example/p\n\n{}", nil},
		{"sniffed-html", "", `<!DOCTYPE html><p>x</p>`, "URL: https://base.example/p\n\nx", nil},
		{"latin1", "text/plain; charset=iso-8859-1", "caf\xe9", "URL: https://base.example/p\n\ncafé", nil},
		{"pdf-refused", "application/pdf", "%PDF", "", ErrContentType},
		{"image-refused", "image/png", "\x89PNG", "", ErrContentType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Extract(result(tc.ct, tc.body), 0)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("Extract = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if errors.Is(ErrContentType, rtsandbox.ErrRefused) == false || ErrContentType.Error() != "the page is not HTML, plain text or JSON" {
		t.Errorf("ErrContentType = %q", ErrContentType)
	}
}

func TestExtractBounded(t *testing.T) {
	body := "<p>" + strings.Repeat("ü word ", 50000) + "</p>"
	got, err := Extract(result("text/html", body), 1000)
	if err != nil || len(got) > 1000 || !strings.HasSuffix(got, "[cut at 1000 bytes]") || !utf8.ValidString(got) {
		t.Errorf("Extract(big) = %d bytes, %v; want ≤ 1000 with marker", len(got), err)
	}
	got, _ = Extract(result("text/html", body), 0)
	if len(got) > MaxExtractBytes || !strings.HasSuffix(got, fmt.Sprintf("[cut at %d bytes]", MaxExtractBytes)) {
		t.Errorf("Extract(big, default) = %d bytes", len(got))
	}
}

func FuzzExtractHTML(f *testing.F) {
	for _, tc := range extractCases {
		f.Add(tc.html)
	}
	f.Add("<script>SECRET</script><p>visible</p>")
	f.Fuzz(func(t *testing.T, doc string) {
		title, text, links := ExtractHTML([]byte(doc), "https://base.example/")
		if !utf8.ValidString(text) || !utf8.ValidString(title) {
			t.Fatal("invalid UTF-8")
		}
		if strings.ContainsFunc(text, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
			t.Fatalf("control character in %q", text)
		}
		if len(text) > MaxExtractBytes+4096 || len(links) > MaxLinks {
			t.Fatalf("unbounded: %d bytes, %d links", len(text), len(links))
		}
		for _, l := range links {
			if !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
				t.Fatalf("link %q", l)
			}
		}
		out, err := Extract(&safefetch.Result{URL: "https://base.example/", Header: http.Header{"Content-Type": {"text/html"}}, Body: []byte(doc)}, 2000)
		if err != nil || len(out) > 2000 || !utf8.ValidString(out) {
			t.Fatalf("Extract = %d bytes, %v", len(out), err)
		}
	})
}

// loopback maps one public-looking name to srv through the safefetch
// seams; no DNS query is made and the policy runs unchanged.
func loopback(srv *httptest.Server) *safefetch.Fetcher {
	return &safefetch.Fetcher{
		Resolver: resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
			switch host {
			case "page.example.com":
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			case "internal.example.com":
				return []netip.Addr{netip.MustParseAddr("10.0.0.5")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}),
		Transport: &safefetch.Pinned{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		}},
	}
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

func TestWebFetchRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>P</title><p>Hello</p>`)
		case "/pdf":
			w.Header().Set("Content-Type", "application/pdf")
			fmt.Fprint(w, "%PDF")
		case "/redirect-internal":
			http.Redirect(w, r, "http://internal.example.com/", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	wf := &WebFetch{Fetcher: loopback(srv)}
	run := func(in string) (string, error) {
		return wf.Run(context.Background(), json.RawMessage(in), rtsandbox.HostToolContext{})
	}
	if got, err := run(`{"url":"http://page.example.com/page"}`); err != nil || got != "URL: http://page.example.com/page\nTitle: P\n\nHello" {
		t.Errorf("Run(page) = %q, %v", got, err)
	}
	for _, tc := range []struct {
		name, in string
		class    error
		text     string
	}{
		{"bad-input", `{"url":1}`, ErrFetchInput, ErrFetchInput.Error()},
		{"empty-url", `{"url":""}`, ErrFetchInput, ErrFetchInput.Error()},
		{"too-long", `{"url":"http://page.example.com/` + strings.Repeat("a", 8000) + `"}`, ErrFetchInput, ErrFetchInput.Error()},
		{"loopback-literal", `{"url":"http://127.0.0.1/page"}`, ErrFetchRefused, ErrFetchRefused.Error()},
		{"private-name", `{"url":"http://internal.example.com/"}`, ErrFetchRefused, ErrFetchRefused.Error()},
		{"redirect-private", `{"url":"http://page.example.com/redirect-internal"}`, ErrFetchRefused, ErrFetchRefused.Error()},
		{"file-scheme", `{"url":"file:///etc/passwd"}`, ErrFetchRefused, ErrFetchRefused.Error()},
		{"unknown-name", `{"url":"http://nowhere.example.com/"}`, ErrFetchNetwork, ErrFetchNetwork.Error()},
		{"status", `{"url":"http://page.example.com/missing"}`, ErrFetchStatus, ErrFetchStatus.Error() + " (HTTP 404)"},
		{"pdf", `{"url":"http://page.example.com/pdf"}`, ErrContentType, ErrContentType.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(tc.in)
			if !errors.Is(err, tc.class) || err.Error() != tc.text {
				t.Errorf("Run(%s) = %v; want %q", tc.in, err, tc.text)
			}
			if strings.Contains(fmt.Sprint(err), "example.com") || strings.Contains(fmt.Sprint(err), "127.0.0.1") {
				t.Errorf("error %q names the target", err)
			}
		})
	}
	if !strings.Contains(string(WebFetchSpec.Parameters), `"maxLength":8000`) {
		t.Errorf("WebFetchSpec = %s", WebFetchSpec.Parameters)
	}
}

// A huge page is parsed only up to MaxParseBytes (review finding: the full
// parse of 32 MiB took seconds and a gigabyte), and still yields text.
func TestExtractHTMLBoundsTheParse(t *testing.T) {
	page := []byte("<title>T</title>" + strings.Repeat("<p>x</p>", 8*MaxParseBytes/8))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	title, text, _ := ExtractHTML(page, "https://base.example/")
	runtime.ReadMemStats(&ms)
	if title != "T" || !strings.HasPrefix(text, "x") {
		t.Errorf("ExtractHTML = %q, %.20q", title, text)
	}
	if alloc := ms.TotalAlloc - before; alloc > 200<<20 {
		t.Errorf("ExtractHTML of %d bytes allocated %d MiB; want the parse bounded", len(page), alloc>>20)
	}
}
