package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/console"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeRuntime struct {
	mu     sync.Mutex
	texts  []string
	fresh  int
	script []func() (rtsandbox.Reply, error)
}

// Run records the turn's channel, speaker and sealed text and answers
// with the script's next reply.
func (f *fakeRuntime) Run(_ context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, _ func(int, string)) (rtsandbox.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.texts = append(f.texts, string(b.Channel)+"|"+b.Speaker.ID+"|"+in.SealedText())
	next := f.script[0]
	f.script = f.script[1:]
	reply, err := next()
	return rtsandbox.Answer{Reply: reply}, err
}

func (f *fakeRuntime) Status(context.Context, rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	return rtsandbox.RuntimeStatus{}, nil
}

func (f *fakeRuntime) Remove(context.Context, rtsandbox.ChannelKey) error { return nil }

func (f *fakeRuntime) StartFresh(rtsandbox.ChannelKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fresh++
	return nil
}

func (f *fakeRuntime) Stop(rtsandbox.ChannelKey) bool { return false }

// consoleOnly is a channel set with console:local sandboxed.
type consoleOnly struct{}

func (consoleOnly) Enabled(k rtsandbox.ChannelKey) bool { return k == "console:local" }
func (consoleOnly) Enable(rtsandbox.ChannelKey) error   { return nil }
func (consoleOnly) Disable(rtsandbox.ChannelKey) error  { return nil }

// newChat wires a chat as the wiring does: a router over rt whose owner
// is console:u1, with the chat registered as the console surface.
func newChat(t *testing.T, rt *fakeRuntime, in string, out io.Writer, log *slog.Logger) *console.Chat {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pol, err := access.New(access.Rules{Owners: []access.Identity{"console:u1"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Options{Door: door.New(nil), Channels: consoleOnly{}, Runtime: rt, Access: pol, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	c := &console.Chat{Router: r, Channel: "console:local", Author: router.Author{ID: "u1", Name: "Ann"},
		In: strings.NewReader(in), Out: out, Logger: log}
	if err := r.AddSurface("console", c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChatRunsEachLineAsATurn(t *testing.T) {
	rt := &fakeRuntime{script: []func() (rtsandbox.Reply, error){
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: true, Text: "Hello!"}, nil },
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: false, Text: "secret detail"}, nil },
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{}, errors.New("docker exploded at /var/run") },
	}}
	out := &syncbuf.Buffer{}
	c := newChat(t, rt, "hi\n\n/fresh\nagain\nthird\n/quit\nnever\n", out, nil)
	c.Spinner = true
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"console:local|u1|hi", "console:local|u1|again", "console:local|u1|third"}
	if diff := cmp.Diff(want, rt.texts); diff != "" {
		t.Errorf("turns (-want +got):\n%s", diff)
	}
	if rt.fresh != 1 { // Run returned: the router ran the command
		t.Errorf("StartFresh calls = %d; want 1", rt.fresh)
	}
	got := out.String()
	for _, s := range []string{"agent> Hello!", "agent> " + rtsandbox.TurnFailedText, "agent> " + rtsandbox.TurnFailedOrStoppedText, rtsandbox.FreshText} {
		if !strings.Contains(got, s) {
			t.Errorf("output lacks %q:\n%s", s, got)
		}
	}
	for _, s := range []string{"secret detail", "docker exploded"} {
		if strings.Contains(got, s) {
			t.Errorf("output shows a detail %q:\n%s", s, got)
		}
	}
}

func TestPrintableDropsTerminalControls(t *testing.T) {
	in := "ok\x1b]52;c;ZXZpbA==\x07 \x1b[2Jline\nnext\ttab\u009b31m"
	if got, want := console.Printable(in), "ok]52;c;ZXZpbA== [2Jline\nnext\ttab31m"; got != want {
		t.Errorf("Printable(%q) = %q; want %q", in, got, want)
	}
}

// A runtime panic is answered with the fixed text and the chat goes on.
func TestChatSurvivesRuntimePanic(t *testing.T) {
	rt := &fakeRuntime{script: []func() (rtsandbox.Reply, error){
		func() (rtsandbox.Reply, error) { panic("runtime broke on secret-words") },
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: true, Text: "Still here."}, nil },
	}}
	out := &syncbuf.Buffer{}
	logs := &syncbuf.Buffer{}
	c := newChat(t, rt, "one\ntwo\n", out, slog.New(slog.NewJSONHandler(logs, nil)))
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, s := range []string{"agent> " + rtsandbox.TurnFailedOrStoppedText, "agent> Still here."} {
		if !strings.Contains(got, s) {
			t.Errorf("output lacks %q:\n%s", s, got)
		}
	}
	if l := logs.String(); !strings.Contains(l, "recovered from a panic") || strings.Contains(l, "secret-words") {
		t.Errorf("logs = %s; want the recovered panic without its value", l)
	}
}
