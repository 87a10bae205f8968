package search

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
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
	b, err := New(Config{Provider: SearXNG, URL: srv.URL + "/search?lang=en", AllowHTTP: true})
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
	b, err := New(Config{Provider: Brave, URL: srv.URL, AllowHTTP: true, Key: func() rtsandbox.Secret { return rtsandbox.Secret(key) }})
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
		b, err := New(Config{Provider: SearXNG, URL: srv.URL + tc.path, AllowHTTP: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Search(context.Background(), "q"); !errors.Is(err, tc.want) || !errors.Is(err, rtsandbox.ErrUpstream) {
			t.Errorf("%s: Search = %v; want %v", tc.path, err, tc.want)
		}
	}
	b, _ := New(Config{Provider: SearXNG, URL: srv.URL, AllowHTTP: true})
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
		"http-without-allow": {Provider: SearXNG, URL: "http://127.0.0.1/"},
		"userinfo":           {Provider: SearXNG, URL: "https://u:p@s.example/"},
		"provider":           {Provider: "google", URL: "https://s.example/"},
		"results":            {Provider: Brave, URL: "https://s.example/", Results: MaxResults + 1},
		"no-host":            {Provider: Brave, URL: "https:///x"},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v; want ErrConfig", name, err)
		}
	}
}
