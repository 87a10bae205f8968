package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// recordSurface is the console's side: it keeps what Deliver and Typing got.
type recordSurface struct {
	mu     sync.Mutex
	chunks []string
	files  []string
	typing int
}

func (s *recordSurface) Deliver(_ context.Context, d router.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chunks = append(s.chunks, d.Chunk)
	for _, f := range d.Files {
		s.files = append(s.files, f.Name+"="+string(f.Data))
	}
	return nil
}

func (s *recordSurface) Typing(context.Context, rtsandbox.ChannelKey, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.typing++
	return nil
}

func newTestClient(t *testing.T, base string, owner string) (*Client, *recordSurface) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(u, func() string { return guestToken }, func() string { return owner })
	s := &recordSurface{}
	c.Surface = s
	t.Cleanup(c.http.CloseIdleConnections)
	return c, s
}

func alice(text string) router.Message {
	return router.Message{Channel: lobby, ID: "1", Author: router.Author{ID: "alice", Name: "Alice"}, Text: text, MentionsBot: true}
}

// TestClientConversation: the client holds a conversation with the real
// API: a message's reply, with its files, reaches the surface; a dropped
// message and a refused token are errors naming why; fresh and stop run
// with the owner token and are refused without one.
func TestClientConversation(t *testing.T) {
	rt := &fakeRuntime{Turn: echo, Files: func(turnCall) []rtsandbox.File {
		return []rtsandbox.File{{Name: "notes.md", Data: []byte("# notes")}}
	}}
	f := newFixture(t, rt, nil)
	c, s := newTestClient(t, f.srv.URL, ownerToken)
	if err := c.Handle(context.Background(), alice("hello")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"echo: hello"}, s.chunks); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"notes.md=# notes"}, s.files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if s.typing != 1 {
		t.Errorf("typing = %d; want 1 (the console's spinner)", s.typing)
	}

	other := alice("hi")
	other.Channel = "http:elsewhere"
	if err := c.Handle(context.Background(), other); err == nil || !strings.Contains(err.Error(), router.DropNotSandboxed) {
		t.Errorf("Handle in a channel not sandboxed = %v; want the drop reason %s", err, router.DropNotSandboxed)
	}
	for action, want := range map[string]string{router.ActionFresh: rtsandbox.FreshText, router.ActionStop: rtsandbox.IdleText} {
		got, err := c.Command(context.Background(), router.Command{Channel: lobby, Action: action})
		if err != nil || got != want {
			t.Errorf("Command(%s) = %q, %v; want %q", action, got, err, want)
		}
	}
	guestOnly, _ := newTestClient(t, f.srv.URL, "")
	if _, err := guestOnly.Command(context.Background(), router.Command{Channel: lobby, Action: router.ActionFresh}); !errors.Is(err, rtsandbox.ErrRefused) {
		t.Errorf("Command without an owner token = %v; want ErrRefused", err)
	}
	f.mu.Lock()
	f.token = "another-token"
	f.mu.Unlock()
	if err := c.Handle(context.Background(), alice("again")); !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), textUnauthorized) {
		t.Errorf("Handle with a refused token = %v; want ErrRemote naming %q", err, textUnauthorized)
	}
}

// TestClientNeverFollowsRedirect: a token goes to the API's host only; a
// redirect elsewhere is an error, and the other host never sees the token.
func TestClientNeverFollowsRedirect(t *testing.T) {
	var leaked sync.Map
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store("auth", r.Header.Get("Authorization"))
	}))
	defer elsewhere.Close()
	redirect := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/api/v1/messages", http.StatusTemporaryRedirect))
	defer redirect.Close()
	c, _ := newTestClient(t, redirect.URL, "")
	if err := c.Handle(context.Background(), alice("hi")); !errors.Is(err, ErrRemote) {
		t.Errorf("Handle against a redirect = %v; want ErrRemote", err)
	}
	if v, ok := leaked.Load("auth"); ok {
		t.Errorf("the redirect target got a request (Authorization %q)", v)
	}
}

// TestClientBoundsTheAnswer: an answer past MaxClientAnswerBytes is
// refused after that many bytes, not read whole.
func TestClientBoundsTheAnswer(t *testing.T) {
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 1<<20))
		for range MaxClientAnswerBytes>>20 + 2 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer huge.Close()
	c, _ := newTestClient(t, huge.URL, "")
	if err := c.Handle(context.Background(), alice("hi")); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Handle of an oversized answer = %v; want the size refusal", err)
	}
}
