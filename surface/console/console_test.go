package console_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
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

func (f *fakeRuntime) RunTurn(_ context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.texts = append(f.texts, string(b.Channel)+"|"+b.Speaker.ID+"|"+text)
	next := f.script[0]
	f.script = f.script[1:]
	return next()
}

func (f *fakeRuntime) StartFresh(rtsandbox.ChannelKey) error { f.fresh++; return nil }

func TestChatRunsEachLineAsATurn(t *testing.T) {
	rt := &fakeRuntime{script: []func() (rtsandbox.Reply, error){
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: true, Text: "Hello!"}, nil },
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: false, Text: "secret detail"}, nil },
		func() (rtsandbox.Reply, error) { return rtsandbox.Reply{}, errors.New("docker exploded at /var/run") },
	}}
	var out bytes.Buffer
	c := &console.Chat{Runtime: rt, Channel: "console:local", Speaker: rtsandbox.Speaker{ID: "u1", Name: "Ann", PrincipalID: "console:u1"},
		In: strings.NewReader("hi\n\n/fresh\nagain\nthird\n/quit\nnever\n"), Out: &out, Spinner: true}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"console:local|u1|hi", "console:local|u1|again", "console:local|u1|third"}
	if diff := cmp.Diff(want, rt.texts); diff != "" {
		t.Errorf("turns (-want +got):\n%s", diff)
	}
	if rt.fresh != 1 {
		t.Errorf("StartFresh calls = %d; want 1", rt.fresh)
	}
	got := out.String()
	for _, s := range []string{"agent> Hello!", "agent> " + console.TextFailed, "agent> " + console.TextStopped, console.TextFresh} {
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
	var out bytes.Buffer
	logs := &syncbuf.Buffer{}
	c := &console.Chat{Runtime: rt, Channel: "console:local", Speaker: rtsandbox.Speaker{ID: "u1", Name: "Ann", PrincipalID: "console:u1"},
		In: strings.NewReader("one\ntwo\n"), Out: &out, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, s := range []string{"agent> " + console.TextStopped, "agent> Still here."} {
		if !strings.Contains(got, s) {
			t.Errorf("output lacks %q:\n%s", s, got)
		}
	}
	if l := logs.String(); !strings.Contains(l, "recovered from a panic") || strings.Contains(l, "secret-words") {
		t.Errorf("logs = %s; want the recovered panic without its value", l)
	}
}
