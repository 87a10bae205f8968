package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/console"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// filesRuntime answers every turn with reply and files.
type filesRuntime struct {
	fakeRuntime
	reply string
	files []rtsandbox.File
}

func (f *filesRuntime) Run(context.Context, rtsandbox.Binding, rtsandbox.TurnInput, func(int, string)) (rtsandbox.Answer, error) {
	return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true, Text: f.reply}, Files: f.files}, nil
}

// TestDoorNothingLeavesConsole (issue 21 item 2): a model key planted in a
// turn's reply (raw), its file (base64 in the bytes) and a research report
// reaches neither the terminal nor the files directory in any form: the
// terminal shows the fixed failure text, no file is listed or saved, and
// the log names the class and the credential's key. (The terminal shows no
// preview: it takes none.)
func TestDoorNothingLeavesConsole(t *testing.T) {
	const key = "sk-console-Planted/Key+0123456789"
	rt := &filesRuntime{reply: "Here it is: " + key,
		files: []rtsandbox.File{{Name: "key.txt", Data: []byte("k=" + base64.StdEncoding.EncodeToString([]byte(key)))}}}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	pol, err := access.New(access.Rules{Owners: []access.Identity{"console:u1"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Options{Channels: consoleOnly{}, Runtime: rt, Access: pol, Logger: log,
		Door: door.New([]door.Secret{{Name: "model.api_key_env", Read: func() rtsandbox.Secret { return key }}})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	out := &syncbuf.Buffer{}
	dir := t.TempDir()
	c := &console.Chat{Router: r, Channel: "console:local", Author: router.Author{ID: "u1", Name: "Ann"},
		In: strings.NewReader("tell me\n/quit\n"), Out: out, Logger: log, FilesDir: dir}
	if err := r.AddSurface("console", c); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.PostReport(context.Background(), "console:local", "Research report: "+key); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if err := upstream.CheckText(got, key); err != nil {
		t.Fatalf("the terminal shows the key:\n%s", got)
	}
	if n := strings.Count(got, "agent> "+rtsandbox.TurnFailedOrStoppedText); n != 2 || strings.Contains(got, "file>") {
		t.Errorf("terminal:\n%s\nwant the failure text twice and no file", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("files directory holds %v (%v); want nothing saved", entries, err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("saved file %s holds the key", e.Name())
		}
	}
	l := logs.String()
	if upstream.CheckText(l, key) != nil || !strings.Contains(l, `"class":"credential at the door"`) || !strings.Contains(l, "model.api_key_env") {
		t.Errorf("log:\n%s\nwant the class and the config key, never the key", l)
	}
}
