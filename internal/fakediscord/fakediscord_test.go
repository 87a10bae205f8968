package fakediscord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClientReachesOnlyTheFake(t *testing.T) {
	s := New(Options{Token: "tok"})
	defer s.Close()
	c := s.Client()
	if _, err := c.Get("https://example.com/"); err == nil || !strings.Contains(err.Error(), "no network") {
		t.Errorf("GET example.com = %v; want a refusal", err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "https://discord.com/api/v9/gateway", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /gateway = %d; want 200", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", "https://discord.com/api/v9/channels/1/messages", strings.NewReader(`{"content":"x"}`))
	req.Header.Set("Authorization", "Bot wrong")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	calls := s.Calls()
	if resp.StatusCode != http.StatusUnauthorized || len(calls) != 2 || calls[1].Status != 401 || calls[1].Path != "/channels/1/messages" {
		t.Errorf("wrong token: status %d, calls %+v", resp.StatusCode, calls)
	}
	c.CloseIdleConnections()
}

// Uploads through the real discordgo client: multipart/form-data with
// payload_json and files[n]; the fake records each file's name and bytes
// in order, stores them as the message's attachments, and refuses what
// Discord refuses (over the upload limit: 413 code 40005; more than ten
// files or an empty message: 400).
func TestUploadThroughDiscordgo(t *testing.T) {
	files := func(n, size int) []*discordgo.File {
		var out []*discordgo.File
		for i := range n {
			out = append(out, &discordgo.File{Name: fmt.Sprintf("f%d \"q\".txt", i), Reader: strings.NewReader(strings.Repeat("x", size))})
		}
		return out
	}
	tests := []struct {
		name      string
		msg       *discordgo.MessageSend
		wantCode  int // 0: accepted
		wantFiles []string
	}{
		{"two-files-with-content", &discordgo.MessageSend{Content: "hi", Files: files(2, 3)}, 0, []string{`f0 "q".txt=xxx`, `f1 "q".txt=xxx`}},
		{"file-without-content", &discordgo.MessageSend{Files: files(1, 1)}, 0, []string{`f0 "q".txt=x`}},
		{"over-the-upload-limit", &discordgo.MessageSend{Content: "hi", Files: files(2, 60)}, http.StatusRequestEntityTooLarge, nil},
		{"eleven-files", &discordgo.MessageSend{Content: "hi", Files: files(11, 1)}, http.StatusBadRequest, nil},
		{"empty-message", &discordgo.MessageSend{}, http.StatusBadRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{Token: "tok", MaxUploadBytes: 100})
			defer s.Close()
			sess, err := discordgo.New("Bot tok")
			if err != nil {
				t.Fatal(err)
			}
			sess.Client = s.Client()
			defer sess.Client.CloseIdleConnections()
			m, err := sess.ChannelMessageSendComplex("42", tt.msg)
			calls := s.Calls()
			if len(calls) != 1 {
				t.Fatalf("calls = %+v; want one", calls)
			}
			var got []string
			for _, f := range calls[0].Files {
				got = append(got, f.Name+"="+string(f.Data))
			}
			if tt.wantCode != 0 {
				re, ok := errors.AsType[*discordgo.RESTError](err)
				if !ok || re.Response.StatusCode != tt.wantCode {
					t.Errorf("send = %v; want HTTP %d", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantFiles, got); diff != "" {
				t.Errorf("recorded files (-want +got):\n%s", diff)
			}
			stored, _ := s.Message(m.ID)
			if len(stored.Attachments) != len(tt.wantFiles) || len(m.Attachments) != len(tt.wantFiles) {
				t.Errorf("stored attachments %+v, answered %+v; want %d", stored.Attachments, m.Attachments, len(tt.wantFiles))
			}
		})
	}
}

// TestWaitIdentified: before a discordgo session identifies, WaitIdentified
// waits (and Post is refused); once READY is sent, it returns and a Post
// reaches the session.
func TestWaitIdentified(t *testing.T) {
	s := New(Options{Token: "tok"})
	defer s.Close()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitIdentified(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdentified with no session = %v; want the deadline", err)
	}
	if _, err := s.Post(Message{ChannelID: "1", Content: "early"}); err == nil {
		t.Fatal("Post with no identified session succeeded")
	}
	sess, err := discordgo.New("Bot tok")
	if err != nil {
		t.Fatal(err)
	}
	sess.Client, sess.Dialer = s.Client(), s.Dialer()
	sess.ShouldReconnectOnError = false
	got := make(chan string, 1)
	sess.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { got <- m.Content })
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- s.WaitIdentified(ctx) }()
	if err := sess.Open(); err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := <-done; err != nil {
		t.Fatalf("WaitIdentified after Open = %v", err)
	}
	if _, err := s.Post(Message{ChannelID: "1", Content: "now"}); err != nil {
		t.Fatalf("Post after WaitIdentified: %v", err)
	}
	select {
	case c := <-got:
		if c != "now" {
			t.Errorf("session got %q; want now", c)
		}
	case <-ctx.Done():
		t.Fatal("the session never got the message")
	}
}
