package hosttool

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
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/safefetch/safefetchtest"
	"github.com/rtsandbox/rtsandbox/webpage"
)

// loopback maps one public-looking name (and one private one) to srv
// through the safefetch seams; no DNS query is made and the policy runs
// unchanged.
func loopback(srv *httptest.Server) *safefetch.Fetcher {
	return safefetchtest.Loopback(srv, map[string]string{"page.example.com": "93.184.216.34", "internal.example.com": "10.0.0.5"})
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
		return wf.Run(context.Background(), json.RawMessage(in), rtsandbox.Binding{})
	}
	if got, err := run(`{"url":"http://page.example.com/page"}`); err != nil || got != "URL: http://page.example.com/page\nTitle: P\n\nHello" {
		t.Errorf("Run(page) = %q, %v", got, err)
	}
	for _, tc := range []struct {
		name, in string
		class    error
		text     string
	}{
		{"bad-input", `{"url":1}`, webpage.ErrFetchInput, webpage.ErrFetchInput.Error()},
		{"empty-url", `{"url":""}`, webpage.ErrFetchInput, webpage.ErrFetchInput.Error()},
		{"too-long", `{"url":"http://page.example.com/` + strings.Repeat("a", 8000) + `"}`, webpage.ErrFetchInput, webpage.ErrFetchInput.Error()},
		{"loopback-literal", `{"url":"http://127.0.0.1/page"}`, webpage.ErrFetchRefused, webpage.ErrFetchRefused.Error()},
		{"private-name", `{"url":"http://internal.example.com/"}`, webpage.ErrFetchRefused, webpage.ErrFetchRefused.Error()},
		{"redirect-private", `{"url":"http://page.example.com/redirect-internal"}`, webpage.ErrFetchRefused, webpage.ErrFetchRefused.Error()},
		{"file-scheme", `{"url":"file:///etc/passwd"}`, webpage.ErrFetchRefused, webpage.ErrFetchRefused.Error()},
		{"unknown-name", `{"url":"http://nowhere.example.com/"}`, webpage.ErrFetchNetwork, webpage.ErrFetchNetwork.Error()},
		{"status", `{"url":"http://page.example.com/missing"}`, webpage.ErrFetchStatus, webpage.ErrFetchStatus.Error() + " (HTTP 404)"},
		{"pdf", `{"url":"http://page.example.com/pdf"}`, webpage.ErrContentType, webpage.ErrContentType.Error()},
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
	if !strings.Contains(string(WebFetchSpec().Parameters), `"maxLength":8000`) {
		t.Errorf("WebFetchSpec() = %s", WebFetchSpec().Parameters)
	}
}

// A panic in extraction becomes webpage.ErrFetchInternal for the guest and a
// logged record for the operator; the host goes on serving.
func TestWebFetchContainsPanic(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<p>Hello</p>")
	}))
	defer srv.Close()
	var log bytes.Buffer
	wf := &WebFetch{Fetcher: loopback(srv), Logger: slog.New(slog.NewJSONHandler(&log, nil)),
		extract: func(context.Context, *safefetch.Result, int) (string, error) { panic("extractor bug") }}
	in := json.RawMessage(`{"url":"http://page.example.com/"}`)
	got, err := wf.Run(context.Background(), in, rtsandbox.Binding{})
	if got != "" || !errors.Is(err, webpage.ErrFetchInternal) || !errors.Is(err, rtsandbox.ErrUpstream) || err.Error() != "the page could not be read" {
		t.Fatalf("Run(panicking extract) = %q, %v; want webpage.ErrFetchInternal", got, err)
	}
	var rec struct{ Level, Msg, Panic, Stack string }
	if json.Unmarshal(log.Bytes(), &rec) != nil || rec.Level != "ERROR" || rec.Msg != "web_fetch panicked" ||
		rec.Panic != "panic: extractor bug" || !strings.Contains(rec.Stack, "TestWebFetchContainsPanic") {
		t.Errorf("log = %s", log.Bytes())
	}
	wf.extract = nil
	if got, err := wf.Run(context.Background(), in, rtsandbox.Binding{}); err != nil || !strings.HasSuffix(got, "Hello") {
		t.Errorf("Run after the panic = %q, %v", got, err)
	}
}
