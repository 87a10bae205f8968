package worker

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

// newTestOutbox creates the outbox of turn t1 under a temporary workspace
// and writes files into it.
func newTestOutbox(t *testing.T, files map[string]string) *outbox {
	t.Helper()
	b, err := createOutbox(t.TempDir(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// The reference's test "Worker: outbox of more than 10 files or an unsafe name; symlink
// in the outbox refused by no-follow read", and the other bounds of docs/session.md, "Process"
// runTurn steps 10–13.
func TestOutboxCollect(t *testing.T) {
	eleven := map[string]string{}
	for i := range 11 {
		eleven["f"+strconv.Itoa(i)] = "x"
	}
	tests := []struct {
		name    string
		files   map[string]string
		prepare func(t *testing.T, dir string)
		want    []wire.ReplyFile
		wantErr error
	}{
		{"empty", nil, nil, []wire.ReplyFile{}, nil},
		{"two files in name order", map[string]string{"b.txt": "\x01\x02\x03", "a.png": "hi"}, nil,
			[]wire.ReplyFile{{Name: "a.png", Data: "aGk="}, {Name: "b.txt", Data: "AQID"}}, nil},
		{"[SEC] more than 10 files", eleven, nil, nil, errOutputBounds},
		{"[SEC] unsafe name", map[string]string{"bad\x01name": "x"}, nil, nil, errOutputBounds},
		{"[SEC] symlink refused by no-follow read", nil, func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "owner-secret")
			os.WriteFile(outside, []byte("secret"), 0o600)
			os.Symlink(outside, filepath.Join(dir, "link.txt"))
		}, nil, errWorkerOutput},
		{"empty file", map[string]string{"e": ""}, nil, nil, errWorkerOutput},
		{"directory entry", nil, func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "sub"), 0o700) }, nil, errWorkerOutput},
		{"file over 10 MiB", map[string]string{"big": strings.Repeat("x", rtsandbox.MaxReplyFileBytes+1)}, nil, nil, errWorkerOutput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestOutbox(t, tc.files)
			if tc.prepare != nil {
				tc.prepare(t, b.dir)
			}
			got, err := b.collect()
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("collect() error %v; want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(b.dir); len(tc.files) == 0 && tc.prepare == nil && !os.IsNotExist(err) {
				t.Errorf("empty outbox not removed")
			}
		})
	}
}

// The outbox directory itself planted as a symlink is not followed.
func TestOutboxDirSymlinkRefused(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "owner.txt"), []byte("secret"), 0o600)
	os.MkdirAll(filepath.Join(ws, "outbox"), 0o700)
	os.Symlink(outside, filepath.Join(ws, "outbox", "t1"))
	b, err := createOutbox(ws, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.collect(); !errors.Is(err, errWorkerOutput) {
		t.Errorf("collect() through a symlinked outbox: %v; want errWorkerOutput", err)
	}
	if _, err := b.save("image", []byte("x"), "png"); err == nil {
		t.Errorf("save() wrote through a symlinked outbox")
	}
}

// save names files stem.ext, stem-2.ext …, never writing through a
// planted link.
func TestOutboxSave(t *testing.T) {
	b := newTestOutbox(t, nil)
	outside := filepath.Join(t.TempDir(), "owner")
	os.WriteFile(outside, []byte("owner"), 0o600)
	os.Symlink(outside, filepath.Join(b.dir, "image.png"))
	name, err := b.save("image", []byte{1}, "png")
	if err != nil || name != "image-2.png" {
		t.Errorf("save() = %q, %v; want image-2.png", name, err)
	}
	if data, _ := os.ReadFile(outside); string(data) != "owner" {
		t.Errorf("outside file changed: %q", data)
	}
	for _, bad := range []struct{ stem, ext string }{{"../x", "png"}, {"x", "PNG"}, {"x", "tar.gz"}} {
		if _, err := b.save(bad.stem, []byte{1}, bad.ext); !errors.Is(err, errOutputBounds) {
			t.Errorf("save(%q, %q) = %v; want errOutputBounds", bad.stem, bad.ext, err)
		}
	}
}

// A host tool's image goes to the outbox and comes back as a reply file;
// a result private to another reader (bob; the turn's reader is ann)
// never reaches this reader's model: it is the placeholder.
func TestSessionHostToolImageAndPrivate(t *testing.T) {
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "img"})),
		fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "private"})),
		fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "fail"})),
		fakemodel.Reply("done"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.setConfig(toolsConfig, false)
	b.tools["lookup"] = func(in json.RawMessage) string {
		switch {
		case strings.Contains(string(in), "img"):
			return `{"ok":true,"text":"drawn","image":{"data":"AQID","mimeType":"image/webp"}}`
		case strings.Contains(string(in), "private"):
			return `{"ok":true,"text":"RESULT_SECRET","privateTo":"bob"}`
		}
		return `{"ok":false,"error":"no such thing"}`
	}
	w := startWorker(t, b, t.TempDir())
	got := b.execute(sessionTurn("t1", "draw"))
	want := wire.SessionResult{OK: true, Text: "done", Files: []wire.ReplyFile{{Name: "image.png", Data: "AQID"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	reqs := model.Requests()
	results := []string{reqs[1].Last().Text(), reqs[2].Last().Text(), reqs[3].Last().Text()}
	if diff := cmp.Diff([]string{"drawn", hiddenPrivate, "no such thing"}, results); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	for _, r := range reqs {
		if strings.Contains(string(r.Raw), "RESULT_SECRET") {
			t.Errorf("[SEC] the private tool result reached the model")
		}
	}
	if n := w.log.count(t, logToolFailed); n != 0 {
		t.Errorf("%d %q lines; want 0 (a private result is no failure)", n, logToolFailed)
	}
}

func TestParseToolResponse(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    wire.SessionToolResponse
		wantErr error
	}{
		{"ok", `{"ok":true,"text":"t","extra":1}`, wire.SessionToolResponse{OK: true, Text: "t"}, nil},
		{"error", `{"ok":false,"error":"e"}`, wire.SessionToolResponse{Error: "e"}, nil},
		{"image", `{"ok":true,"image":{"data":"AQID","mimeType":"image/png"}}`, wire.SessionToolResponse{OK: true, Image: &wire.Image{Data: "AQID", MIMEType: "image/png"}}, nil},
		{"ok missing", `{"text":"t"}`, wire.SessionToolResponse{}, errToolResponse},
		{"ok a string", `{"ok":"true"}`, wire.SessionToolResponse{}, errToolResponse},
		{"text not a string", `{"ok":true,"text":1}`, wire.SessionToolResponse{}, errToolResponse},
		{"bad image", `{"ok":true,"image":{"data":"bad%","mimeType":"image/png"}}`, wire.SessionToolResponse{}, errToolResponse},
		{"image not an object", `{"ok":true,"image":[]}`, wire.SessionToolResponse{}, errToolResponse},
		{"privateTo", `{"ok":true,"text":"s","privateTo":"ann"}`, wire.SessionToolResponse{OK: true, Text: "s", PrivateTo: "ann"}, nil},
		{"privateTo on an error", `{"ok":false,"error":"e","privateTo":"ann"}`, wire.SessionToolResponse{Error: "e", PrivateTo: "ann"}, nil},
		{"privateTo empty", `{"ok":true,"privateTo":""}`, wire.SessionToolResponse{}, errToolResponse},
		{"privateTo not a string", `{"ok":true,"privateTo":1}`, wire.SessionToolResponse{}, errToolResponse},
		{"privateTo too long", `{"ok":true,"privateTo":"` + strings.Repeat("a", 257) + `"}`, wire.SessionToolResponse{}, errToolResponse},
		{"not an object", `[]`, wire.SessionToolResponse{}, errToolResponse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseToolResponse([]byte(tc.body))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error %v; want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func FuzzParseToolResponse(f *testing.F) {
	f.Add([]byte(`{"ok":true,"text":"t","image":{"data":"AQID","mimeType":"image/png"}}`))
	f.Add([]byte(`{"ok":false,"privateTo":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseToolResponse(data)
		if err == nil && r.Image != nil && wire.ValidateImage(*r.Image) != nil {
			t.Fatal("an invalid image passed")
		}
		if n := rtsandbox.UTF16Len(r.PrivateTo); err == nil && n > rtsandbox.MaxSessionField {
			t.Fatalf("a private owner of %d units passed", n)
		}
	})
}

// A reply file the worker cannot read fails the turn with the
// reference's exact text; the cause stays in the log.
func TestSessionOutboxFailureResult(t *testing.T) {
	model := fakemodel.New(fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Content: "made a file"}
	}))
	defer model.Close()
	b := startSessionBroker(t, model)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "outbox", "t1"), 0o700)
	os.Symlink("/etc/hostname", filepath.Join(ws, "outbox", "t1", "link"))
	w := startWorker(t, b, ws)
	if got := b.execute(sessionTurn("t1", "hi")); !cmp.Equal(got, wire.SessionResult{Error: "Worker output failed"}) {
		t.Errorf("result %+v; want ok:false Worker output failed", got)
	}
	if !strings.Contains(w.log.String(), "link") {
		t.Errorf("the cause is not in the log:\n%s", w.log.String())
	}
}
