package search

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/upstream/endpointtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSearXNG(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		fmt.Fprint(w, `{"results":[{"title":"A <b>title</b>","url":"https://a.example/","content":"snippet\none"},`+
			`{"title":"","url":"javascript:alert(1)","content":"x"},{"title":"B","url":"http://b.example/b","content":""}]}`)
	}))
	defer srv.Close()
	b, err := New(Config{Provider: SearXNG, URL: ep(srv.URL + "/search?lang=en")})
	if err != nil {
		t.Fatal(err)
	}
	text, err := b.Search(context.Background(), " otters & co ")
	if err != nil {
		t.Fatal(err)
	}
	want := "1. A title\n   https://a.example/\n   snippet one\n2. B\n   http://b.example/b"
	if text != want {
		t.Errorf("Search = %q; want %q", text, want)
	}
	q := got.URL.Query()
	if q.Get("q") != "otters & co" || q.Get("format") != "json" || q.Get("lang") != "en" || got.Method != http.MethodGet {
		t.Errorf("request %s %s", got.Method, got.URL)
	}
	if got.Header.Get("Authorization") != "" {
		t.Errorf("Authorization sent without a key")
	}
}

func TestBrave(t *testing.T) {
	var token string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token = r.Header.Get("X-Subscription-Token")
		switch r.URL.Query().Get("q") {
		case "echo":
			fmt.Fprintf(w, `{"web":{"results":[{"title":"%s","url":"https://x.example/","description":""}]}}`, token)
		case "none":
			fmt.Fprint(w, `{"web":{"results":[]}}`)
		default:
			fmt.Fprint(w, `{"web":{"results":[{"title":"Otters","url":"https://o.example/","description":"They <strong>float</strong> &amp; sleep"}]}}`)
		}
	}))
	defer srv.Close()
	key := "k1"
	b, err := New(Config{Provider: Brave, URL: ep(srv.URL), Key: func() rtsandbox.Secret { return rtsandbox.Secret(key) }})
	if err != nil {
		t.Fatal(err)
	}
	text, err := b.Search(context.Background(), "otters")
	if err != nil || text != "1. Otters\n   https://o.example/\n   They float & sleep" || token != "k1" {
		t.Errorf("Search = %q, %v, token %q", text, err, token)
	}
	key = "k2" // read on every call
	if _, err := b.Search(context.Background(), "otters"); err != nil || token != "k2" {
		t.Errorf("rotated key: token %q, %v", token, err)
	}
	if text, err := b.Search(context.Background(), "none"); err != nil || text != NoResults {
		t.Errorf("Search(none) = %q, %v", text, err)
	}
	if _, err := b.Search(context.Background(), "echo"); err == nil || strings.Contains(err.Error(), "k2") {
		t.Errorf("Search(echo) = %v; want the reflection refused", err)
	}
	key = ""
	if _, err := b.Search(context.Background(), "otters"); !errors.Is(err, ErrNoKey) {
		t.Errorf("Search(no key) = %v; want ErrNoKey", err)
	}
}

func TestFailures(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("redirect target contacted")
	}))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, target.URL, http.StatusFound)
		case "/status":
			http.Error(w, "no", http.StatusTooManyRequests)
		case "/large":
			w.Write([]byte(`{"results":"` + strings.Repeat("x", MaxResponseBytes) + `"}`))
		case "/notjson":
			fmt.Fprint(w, "<html>")
		case "/shape":
			fmt.Fprint(w, `{"results":{"a":1}}`)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path string
		want error
	}{
		{"/redirect", ErrRedirect}, {"/status", ErrStatus}, {"/large", ErrTooLarge},
		{"/notjson", ErrAnswer}, {"/shape", ErrAnswer},
	} {
		b, err := New(Config{Provider: SearXNG, URL: ep(srv.URL + tc.path)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Search(context.Background(), "q"); !errors.Is(err, tc.want) || !errors.Is(err, rtsandbox.ErrUpstream) {
			t.Errorf("%s: Search = %v; want %v", tc.path, err, tc.want)
		}
	}
	b, _ := New(Config{Provider: SearXNG, URL: ep(srv.URL)})
	for _, q := range []string{"", "  ", strings.Repeat("q", MaxQueryLen+1)} {
		if _, err := b.Search(context.Background(), q); !errors.Is(err, ErrQuery) {
			t.Errorf("Search(%d chars) = %v; want ErrQuery", len(q), err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Search(ctx, "q"); !errors.Is(err, ErrCanceled) {
		t.Errorf("Search(cancelled) = %v; want ErrCanceled", err)
	}
}

func TestConfig(t *testing.T) {
	for name, c := range map[string]Config{
		"no-url":   {Provider: SearXNG},
		"provider": {Provider: "google", URL: ep("https://s.example/")},
		"results":  {Provider: Brave, URL: ep("https://s.example/"), Results: MaxResults + 1},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v; want ErrConfig", name, err)
		}
	}
}

// searchKey is the search service's bearer in the reflection tests.
const searchKey = "rts-search-key-0123456789abcdef"

// searxngEcho is a loopback SearXNG-like service that answers every query
// with one result whose title and content are the given JSON string
// bodies (already escaped for JSON).
func searxngEcho(t *testing.T, title, content string) Backend {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"results":[{"title":"%s","url":"https://r.example/","content":"%s"}]}`, title, content)
	}))
	t.Cleanup(srv.Close)
	b, err := New(Config{Provider: SearXNG, URL: ep(srv.URL), Key: func() rtsandbox.Secret { return searchKey }})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decimalEntities(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, "&#%d;", r)
	}
	return b.String()
}

// Regression (review finding): the JSON check ran before rendering, and
// rendering decodes character references and strips tags, so a key
// written as references or split by tags in a result's title or snippet
// reached the research model as the clear key. The search now fails
// closed with the reflection class and never returns the key.
func TestSearchKeyHiddenByMarkupRefused(t *testing.T) {
	entities := decimalEntities(searchKey)
	tagSplit := "rts-<b></b>search-<span class=\\\"x\\\">key</span>-0123456789abcdef"
	for name, tc := range map[string]struct{ title, content string }{
		"entities-in-title":   {"Found: " + entities, "a snippet"},
		"entities-in-snippet": {"A title", "key was " + entities + " all along"},
		"tags-in-title":       {tagSplit, "a snippet"},
		"tags-in-snippet":     {"A title", "it is " + tagSplit + "."},
	} {
		t.Run(name, func(t *testing.T) {
			text, err := searxngEcho(t, tc.title, tc.content).Search(context.Background(), "q")
			if !errors.Is(err, upstream.ErrReflect) || !errors.Is(err, rtsandbox.ErrUpstream) {
				t.Errorf("Search = %q, %v; want upstream.ErrReflect", text, err)
			}
			if strings.Contains(text, searchKey) || err != nil && strings.Contains(err.Error(), searchKey) {
				t.Errorf("Search passed the key on: %q, %v", text, err)
			}
		})
	}
}

// Every form of the key in a result is refused, whether the JSON check or
// the check of the rendered text finds it (the rows marked new passed
// before the rendered text was checked or before the forms existed).
func TestSearchReflectionForms(t *testing.T) {
	k := []byte(searchKey)
	for _, tc := range []struct{ name, snippet string }{
		{"raw", searchKey},
		{"json-escaped", strings.ReplaceAll(searchKey, "-", `\u002d`)},
		{"base64", base64.StdEncoding.EncodeToString(k)},
		{"lower-hex", hex.EncodeToString(k)},
		// new
		{"html-decimal-entities", decimalEntities(searchKey)},
		{"html-hex-entity-for-hyphen", strings.ReplaceAll(searchKey, "-", "&#x2d;")},
		{"html-double-encoded", strings.ReplaceAll(searchKey, "-", "&amp;#45;")},
		{"tag-split", "rts-<b>search</b>-key-<i></i>0123456789abcdef"},
		{"tag-split-and-entity", "rts&#45;<em>search</em>&#x2D;key-0123456789abcdef"},
		{"base64-offset-1", base64.StdEncoding.EncodeToString(append([]byte("x"), k...))},
		{"base64-offset-2", base64.StdEncoding.EncodeToString(append([]byte("xy"), k...))},
		{"bearer-base64", base64.StdEncoding.EncodeToString([]byte("Bearer " + searchKey))},
		{"authorization-base64url", base64.RawURLEncoding.EncodeToString([]byte("Authorization: Bearer " + searchKey))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, err := searxngEcho(t, "A title", "see "+tc.snippet+" here").Search(context.Background(), "q")
			if !errors.Is(err, upstream.ErrReflect) {
				t.Errorf("Search = %q, %v; want upstream.ErrReflect", text, err)
			}
		})
	}
	// An ordinary answer with markup and references still renders.
	text, err := searxngEcho(t, "R&amp;D <b>news</b>", "rts &#45; search key").Search(context.Background(), "q")
	if err != nil || text != "1. R&D news\n   https://r.example/\n   rts - search key" {
		t.Errorf("Search(clean) = %q, %v", text, err)
	}
}

// ep is a checked endpoint; the test services run on loopback http.
func ep(raw string) upstream.Endpoint { return upstream.MustParseEndpoint(raw, true) }

// A search backend refuses exactly what the one endpoint rule refuses:
// what the rule accepts, New takes; what it refuses never becomes an
// Endpoint, and New refuses the zero one.
func TestEndpointRuleRegression(t *testing.T) {
	endpointtest.Run(t, ErrConfig, func(e upstream.Endpoint) error {
		_, err := New(Config{Provider: SearXNG, URL: e})
		return err
	})
}
