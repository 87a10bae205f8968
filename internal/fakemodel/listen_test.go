package fakemodel

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8788", true},
		{"127.1.2.3:0", true},
		{"[::1]:8788", true},
		{"localhost:8788", true},
		{"[::ffff:127.0.0.1]:1", true},
		{"0.0.0.0:8788", false},
		{":8788", false},
		{"[::]:8788", false},
		{"192.168.1.10:8788", false},
		{"example.com:8788", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		if got := LoopbackAddr(tt.addr); got != tt.want {
			t.Errorf("LoopbackAddr(%q) = %v; want %v", tt.addr, got, tt.want)
		}
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if s, err := Listen(Options{Addr: addr}, Reply("x")); !errors.Is(err, ErrNotLoopback) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Listen(%q) = %v; want ErrNotLoopback", addr, err)
		}
	}
}

func TestListenAddrPathNoRecord(t *testing.T) {
	s, err := Listen(Options{Addr: "127.0.0.1:0", Path: "/v1/chat/completions", NoRecord: true, Loop: true}, Reply("hello"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for i, want := range []string{"chatcmpl-fake-0", "chatcmpl-fake-1"} {
		if status, got := post(t, s, "", chatBody); status != 200 || got["id"] != want {
			t.Errorf("POST %d = %d, id %v; want 200 and id %s", i, status, got["id"], want)
		}
	}
	resp, err := http.Post(s.URL()+"/v1/messages", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST on another path = %d; want 404", resp.StatusCode)
	}
	if got := s.Requests(); len(got) != 0 {
		t.Errorf("Requests() = %d with NoRecord; want none", len(got))
	}
}

// A second Listen on a busy address returns the error, not a panic.
func TestListenBusyAddr(t *testing.T) {
	s := start(t, Options{}, Reply("x"))
	addr := strings.TrimPrefix(s.URL(), "http://")
	if s2, err := Listen(Options{Addr: addr}, Reply("x")); err == nil {
		s2.Close()
		t.Errorf("Listen(%q) on a busy address = nil; want an error", addr)
	}
}
