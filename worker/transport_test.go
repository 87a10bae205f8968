package worker

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The stand-in broker fails the test on any header beyond Host,
// Content-Type, Content-Length and Authorization; this test makes one call
// of each route shape and checks the bodies.
func TestBrokerSendsExactHeaders(t *testing.T) {
	b := startBroker(t)
	b.handle(wire.ToolRoute("clock"), func(body string) (int, string) { return 200, `{ "text" : "noon" }` })
	c := newBroker(b.sock)
	got, err := c.post(context.Background(), wire.ToolRoute("clock"), fields(`{"tz":"<UTC>"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"text":"noon"}` {
		t.Errorf("post() = %s; want the compacted answer", got)
	}
	if body := b.gotBodies(wire.ToolRoute("clock"))[0]; body != `{"tz":"<UTC>"}` {
		t.Errorf("body = %s; want JS-style JSON without HTML escapes", body)
	}
	if s := b.gotStatuses(); len(s) != 1 || s[0] != 200 {
		t.Errorf("statuses = %v; want [200]", s)
	}
}

func TestBrokerPostErrors(t *testing.T) {
	big := `{"text":"` + strings.Repeat("x", rtsandbox.MaxBrokerResponse) + `"}`
	tests := []struct {
		name    string
		status  int
		answer  string
		refused bool
	}{
		{"status-403", http.StatusForbidden, `{"error":"forbidden"}`, true},
		{"status-502", http.StatusBadGateway, `{"error":"broker call failed"}`, true},
		{"status-201", http.StatusCreated, `{}`, true},
		{"not-json", http.StatusOK, `<html>`, false},
		{"empty", http.StatusOK, ``, false},
		{"over-1-mib", http.StatusOK, big, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := startBroker(t)
			b.handle(wire.RouteModel, func(string) (int, string) { return tt.status, tt.answer })
			_, err := newBroker(b.sock).post(context.Background(), wire.RouteModel, map[string]string{})
			if err == nil || errors.Is(err, errBrokerRefused) != tt.refused {
				t.Errorf("post() = %v; want error (refused %v)", err, tt.refused)
			}
		})
	}
}

func TestBrokerAcceptsExactlyOneMiB(t *testing.T) {
	answer := `"` + strings.Repeat("x", rtsandbox.MaxBrokerResponse-2) + `"`
	b := startBroker(t)
	b.handle(wire.RouteModel, func(string) (int, string) { return 200, answer })
	if got, err := newBroker(b.sock).post(context.Background(), wire.RouteModel, map[string]string{}); err != nil || len(got) != rtsandbox.MaxBrokerResponse {
		t.Errorf("post(1 MiB answer) = %d bytes, %v; want ok", len(got), err)
	}
}

func TestBrokerUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := newBroker(filepath.Join(t.TempDir(), "none.sock")).post(ctx, wire.RouteModel, map[string]string{})
	if err == nil {
		t.Errorf("post(missing socket) = nil; want error")
	}
}
