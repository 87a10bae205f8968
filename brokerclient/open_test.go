package brokerclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Open sends the same headers as Post and hands back any status with its
// headers and body.
func TestOpenReturnsAnyAnswer(t *testing.T) {
	var got http.Header
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(529)
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error"}}`)
	})
	resp, err := (&brokerclient.Client{Socket: sock}).Open(context.Background(), wire.RouteAnthropicMessages, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.Status != 529 || resp.Header.Get("Retry-After") != "3" || !strings.Contains(string(body), "overloaded_error") {
		t.Errorf("Open = %d %v %q, %v; want 529, retry-after 3 and the body", resp.Status, resp.Header, body, err)
	}
	want := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"2"}, "Authorization": {"Bearer sandbox-dummy-key"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request headers (-want +got):\n%s", diff)
	}
}

// Timeout bounds each wait, not the whole stream: a body that keeps
// moving outlives it, one that stalls is cut.
func TestOpenIdleTimeout(t *testing.T) {
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 6 {
			io.WriteString(w, "data: x\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(40 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // stall
		io.WriteString(w, "data: late\n\n")
	})
	c := &brokerclient.Client{Socket: sock, Timeout: 150 * time.Millisecond}
	resp, err := c.Open(context.Background(), wire.RouteAnthropicMessages, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	body, err := io.ReadAll(resp.Body)
	if !errors.Is(err, os.ErrDeadlineExceeded) || strings.Count(string(body), "data: x") != 6 || strings.Contains(string(body), "late") {
		t.Errorf("read %q, %v; want the six moving events, then a deadline error", body, err)
	}
}

// The context ends the call while the body is read.
func TestOpenContextEndsBody(t *testing.T) {
	release := make(chan struct{})
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "start")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancelCause(context.Background())
	resp, err := (&brokerclient.Client{Socket: sock}).Open(ctx, wire.RouteAnthropicMessages, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	stop := errors.New("turn over")
	time.AfterFunc(50*time.Millisecond, func() { cancel(stop) })
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, stop) {
		t.Errorf("read error = %v; want the context's cause", err)
	}
}

// Do sends a GET without a body or content type, and adds extra headers
// to the fixed ones without letting them replace the host or the bearer.
func TestDoGetAndExtraHeaders(t *testing.T) {
	type seen struct {
		method, host string
		header       http.Header
		body         string
	}
	got := make(chan seen, 2)
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Host, r.Header.Clone(), string(body)}
		w.WriteHeader(http.StatusRequestTimeout)
	})
	c := &brokerclient.Client{Socket: sock}
	resp, err := c.Do(context.Background(), brokerclient.Request{Method: http.MethodGet, Route: "/worker/next"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Close()
	if resp.Status != http.StatusRequestTimeout {
		t.Errorf("status %d; want 408 handed back", resp.Status)
	}
	want := seen{"GET", "broker", http.Header{"Authorization": {"Bearer sandbox-dummy-key"}}, ""}
	if diff := cmp.Diff(want, <-got, cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("GET (-want +got):\n%s", diff)
	}
	extra := http.Header{"Mcp-Session-Id": {"s1"}, "Authorization": {"Bearer other"}, "Host": {"evil"}}
	resp, err = c.Do(context.Background(), brokerclient.Request{Route: "/mcp/docs", Body: []byte(`{}`), Header: extra})
	if err != nil {
		t.Fatal(err)
	}
	resp.Close()
	want = seen{"POST", "broker", http.Header{
		"Authorization": {"Bearer sandbox-dummy-key"}, "Content-Type": {"application/json"},
		"Content-Length": {"2"}, "Mcp-Session-Id": {"s1"},
	}, "{}"}
	if diff := cmp.Diff(want, <-got, cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("POST (-want +got):\n%s", diff)
	}
}
