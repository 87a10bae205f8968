package worker

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

// pngBytes starts with the PNG signature (the worker sniffs the type; it
// decodes nothing).
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

// attachmentsWorkspace is a workspace whose attachments directory holds
// files (name → content).
func attachmentsWorkspace(t *testing.T, files map[string][]byte) string {
	t.Helper()
	ws := t.TempDir()
	dir := filepath.Join(ws, "attachments")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// readTool runs read_attachment on ws with input, with a fresh budget of
// the turn's images.
func readTool(t *testing.T, ws, input string, turnImages ...wire.Image) (string, *shownImages) {
	t.Helper()
	w := &sessionWorker{o: SessionOptions{Workspace: ws}.withDefaults(), log: newSessionLogger(io.Discard)}
	shown := newShownImages(turnImages)
	fields, ok := object(json.RawMessage(input))
	if !ok {
		t.Fatalf("input %s", input)
	}
	out, err := w.readAttachment(shown).run(t.Context(), toolInput{raw: json.RawMessage(input), fields: fields})
	if err != nil {
		t.Fatalf("read_attachment(%s): %v", input, err)
	}
	return out, shown
}

// read_attachment on what the host saved and on what a guest could plant:
// text by windows, an image shown, and every escape refused.
func TestReadAttachment(t *testing.T) {
	long := strings.Repeat("0123456789", 4000) // 40,000 bytes: two windows
	ws := attachmentsWorkspace(t, map[string][]byte{
		"m1-0-notes.txt": []byte("hello\nworld\n"),
		"m1-1-long.txt":  []byte(long),
		"m1-2-shot.png":  pngBytes,
		"m1-3-data.bin":  {0, 1, 2, 3},
		"m1-4-empty":     {},
	})
	dir := filepath.Join(ws, "attachments")
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("host secret"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "link.txt"))
	os.WriteFile(filepath.Join(ws, "sessions.txt"), []byte("not an attachment"), 0o600)
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	big, _ := os.Create(filepath.Join(dir, "big.txt"))
	big.Truncate(rtsandbox.MaxAttachmentBytes + 1)
	big.Close()
	refused := func(name string) string {
		return fmt.Sprintf("No readable attachment named %q: it is missing, not a regular file, empty or larger than 25 MB.", name)
	}
	invalid := string(errInvalidAttachment) + ": give a file name from /workspace/attachments, without a directory."
	cases := []struct {
		name, input, want string
	}{
		{"text", `{"name":"m1-0-notes.txt"}`, "m1-0-notes.txt: bytes 0 to 12 of 12.\n\nhello\nworld\n"},
		{"first window of a long text", `{"name":"m1-1-long.txt"}`, "m1-1-long.txt: bytes 0 to 32768 of 40000.\n\n" + long[:32768] + "\n\n[7232 bytes more: call read_attachment with offset 32768.]"},
		{"second window", `{"name":"m1-1-long.txt","offset":32768}`, "m1-1-long.txt: bytes 32768 to 40000 of 40000.\n\n" + long[32768:]},
		{"offset past the end", `{"name":"m1-0-notes.txt","offset":12}`, "m1-0-notes.txt has 12 bytes; offset 12 is past its end."},
		{"negative offset", `{"name":"m1-0-notes.txt","offset":-1}`, "Invalid offset: give a whole number of bytes, 0 or more."},
		{"binary", `{"name":"m1-3-data.bin"}`, "m1-3-data.bin is a binary file of 4 bytes; it cannot be shown as text."},
		{"image", `{"name":"m1-2-shot.png"}`, "m1-2-shot.png is an image (image/png, 16 bytes); it is shown to you with this result."},
		{"missing", `{"name":"nope.txt"}`, refused("nope.txt")},
		{"empty", `{"name":"m1-4-empty"}`, refused("m1-4-empty")},
		{"[SEC] symlink to a host file", `{"name":"link.txt"}`, refused("link.txt")},
		{"[SEC] fifo does not block", `{"name":"fifo"}`, refused("fifo")},
		{"[SEC] over 25 MiB", `{"name":"big.txt"}`, refused("big.txt")},
		{"[SEC] traversal ../sessions.txt", `{"name":"../sessions.txt"}`, invalid},
		{"[SEC] absolute path", `{"name":"/etc/passwd"}`, invalid},
		{"[SEC] a directory in the name", `{"name":"sub/x.txt"}`, invalid},
		{"[SEC] dot dot", `{"name":".."}`, invalid},
		{"[SEC] backslash", `{"name":"..\\sessions.txt"}`, invalid},
		{"name not a string", `{"name":1}`, invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, shown := readTool(t, ws, tc.input)
			if got != tc.want {
				t.Errorf("read_attachment(%s) =\n%.300q\nwant\n%.300q", tc.input, got, tc.want)
			}
			wantShown := 0
			if tc.name == "image" {
				wantShown = 1
			}
			if n := len(shown.take()); n != wantShown {
				t.Errorf("%d images shown; want %d", n, wantShown)
			}
		})
	}
}

// [SEC] An attachments directory a guest replaced with a link to a host
// directory is not read through.
func TestSecReadAttachmentDirSymlink(t *testing.T) {
	ws := t.TempDir()
	host := attachmentsWorkspace(t, map[string][]byte{"a.txt": []byte("host file")})
	if err := os.Symlink(filepath.Join(host, "attachments"), filepath.Join(ws, "attachments")); err != nil {
		t.Fatal(err)
	}
	got, _ := readTool(t, ws, `{"name":"a.txt"}`)
	if strings.Contains(got, "host file") || !strings.HasPrefix(got, "No readable attachment") {
		t.Errorf("read_attachment through a linked directory = %q", got)
	}
}

// docs/protocol.md, "Images and files": the images read_attachment shows share the turn's budget of eight.
func TestReadAttachmentImageBudget(t *testing.T) {
	ws := attachmentsWorkspace(t, map[string][]byte{"a.png": pngBytes})
	full := make([]wire.Image, rtsandbox.MaxImages)
	for i := range full {
		full[i] = wire.Image{Data: "AQID", MIMEType: rtsandbox.MIMEPNG}
	}
	got, shown := readTool(t, ws, `{"name":"a.png"}`, full...)
	if want := "a.png is an image (image/png, 16 bytes); it cannot be shown: this turn already shows 8 images or 64 MB."; got != want || len(shown.take()) != 0 {
		t.Errorf("read_attachment = %q; want %q and nothing shown", got, want)
	}
}

// An image read_attachment shows reaches the model as an image part in
// both dialects, through the stand-in broker whose model routes rebuild
// the body with the broker's own rules: in the Messages dialect inside
// the tool_result, in chat completions as a user message of image parts
// after the tool results. The stored conversation keeps no image.
func TestReadAttachmentReachesModel(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIAnthropic, ""} {
		t.Run("api="+api, func(t *testing.T) {
			model := fakemodel.New(
				fakemodel.CallTools(fakemodel.Call("read_attachment", map[string]string{"name": "m1-0-shot.png"})),
				fakemodel.Reply("a small picture"),
			)
			defer model.Close()
			b := startSessionBroker(t, model)
			b.setConfig(`{"modelApi":%q,"model":"m","stream":false,"prompt":"p","timeZone":"UTC","tools":[],"mcp":[]}`, api)
			ws := attachmentsWorkspace(t, map[string][]byte{"m1-0-shot.png": pngBytes})
			startWorker(t, b, ws)
			if r := b.execute(sessionTurn("t1", "what is m1-0-shot.png?")); !r.OK || r.Text != "a small picture" {
				t.Fatalf("result %+v", r)
			}
			reqs := model.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model requests", len(reqs))
			}
			want := []fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: base64.StdEncoding.EncodeToString(pngBytes)}}
			if diff := cmp.Diff(want, reqs[1].Images()); diff != "" {
				t.Errorf("the shown image did not reach the model (-want +got):\n%s", diff)
			}
			var roles []string
			for _, m := range reqs[1].Body.Messages[1:] {
				roles = append(roles, m.Role)
			}
			wantRoles := []string{"user", "assistant", "tool"}
			if api == "" {
				wantRoles = append(wantRoles, "user")
			}
			if diff := cmp.Diff(wantRoles, roles); diff != "" {
				t.Errorf("roles (-want +got):\n%s", diff)
			}
			if len(reqs[0].Images()) != 0 {
				t.Errorf("the first request already had images")
			}
			for _, x := range loadSessions(t, ws) {
				for _, m := range x.messages {
					if strings.Contains(m.Content, base64.StdEncoding.EncodeToString(pngBytes)) {
						t.Errorf("the stored conversation holds the image data")
					}
				}
			}
		})
	}
}

// The turn's images reach the model as image parts in both dialects over
// the stand-in broker (its model routes rebuild the body with the
// broker's rules, and fail the test on a refusal).
func TestTurnImagesReachModel(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIAnthropic, ""} {
		t.Run("api="+api, func(t *testing.T) {
			model := fakemodel.New(fakemodel.Reply("two pictures"))
			defer model.Close()
			b := startSessionBroker(t, model)
			b.setConfig(`{"modelApi":%q,"model":"m","stream":false,"prompt":"p","timeZone":"UTC","tools":[],"mcp":[]}`, api)
			startWorker(t, b, t.TempDir())
			turn := sessionTurn("t1", "compare")
			turn.Images = []wire.Image{{Data: "AQID", MIMEType: rtsandbox.MIMEPNG}, {Data: "R0lG", MIMEType: rtsandbox.MIMEGIF}}
			if r := b.execute(turn); !r.OK {
				t.Fatalf("result %+v", r)
			}
			req := model.Requests()[0]
			want := []fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: "AQID"}, {MIMEType: rtsandbox.MIMEGIF, Data: "R0lG"}}
			if diff := cmp.Diff(want, req.Images()); diff != "" {
				t.Errorf("images (-want +got):\n%s", diff)
			}
			if req.UserText() != "[Ann (ann)] compare" {
				t.Errorf("prompt %q", req.UserText())
			}
		})
	}
}

// The reference's test "Worker: … image_generate reference validation".
// image_generate's reference_images (docs/session.md, "read_attachment and image_generate references"): attachment names are
// replaced by their images before the call; the tool's image lands in
// the outbox as image.png and comes back as a reply file. Each refusal
// is the model's answer and posts nothing.
func TestImageGenerateReferences(t *testing.T) {
	webp := []byte("RIFF\x24\x00\x00\x00WEBPVP8 ")
	ws := attachmentsWorkspace(t, map[string][]byte{
		"m1-0-cat.png":  pngBytes,
		"m1-1-dog.webp": webp,
		"m1-2-fake.png": []byte("<html>"),
		"m1-3-a.txt":    []byte("text"),
	})
	var posted []string
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"both","reference_images":["m1-0-cat.png","m1-1-dog.webp"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":["a","b","c","d","e"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":["../m1-0-cat.png"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":["m1-3-a.txt"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":["m1-2-fake.png"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":["gone.png"]}`)),
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x","reference_images":[1]}`)),
		fakemodel.Reply("made"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.setConfig(`{"modelApi":"anthropic","model":"m","stream":false,"prompt":"p","timeZone":"UTC","mcp":[],
 "tools":[{"name":"image_generate","description":"Draw.","parameters":{"type":"object","properties":{"prompt":{"type":"string"},"reference_images":{"type":"array","maxItems":4}}}}]}`)
	b.tools["image_generate"] = func(in json.RawMessage) string {
		posted = append(posted, string(in))
		return `{"ok":true,"text":"drawn","image":{"data":"AQID","mimeType":"image/png"}}`
	}
	startWorker(t, b, ws)
	got := b.execute(sessionTurn("t1", "draw"))
	want := wire.SessionResult{OK: true, Text: "made", Files: []wire.ReplyFile{{Name: "image.png", Data: "AQID"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("result (-want +got):\n%s", diff)
	}
	wantInput := `{"prompt":"both","reference_images":[{"data":"` + base64.StdEncoding.EncodeToString(pngBytes) + `","mimeType":"image/png"},{"data":"` + base64.StdEncoding.EncodeToString(webp) + `","mimeType":"image/webp"}]}`
	if len(posted) != 1 || posted[0] != wantInput {
		t.Fatalf("posted %q; want one call with %s", posted, wantInput)
	}
	reqs := model.Requests()
	results := []string{"drawn", "At most four references", "Invalid attachment name", "Not an image attachment", "Not an image attachment", "Invalid attachment name", "Invalid attachment name"}
	for i, want := range results {
		last := reqs[i+1].Last()
		if last.Role != "tool" || last.Text() != want {
			t.Errorf("call %d answered %q; want %q", i+1, last.Text(), want)
		}
	}
}

// A host tool's image that the turn's room cannot take is not saved: the
// tool's answer says so, the turn goes on and ends with no reply file.
func TestHostToolImageKeepsTheTurnRoom(t *testing.T) {
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("host_image_generate", `{"prompt":"x"}`)),
		fakemodel.Reply("made"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.setConfig(`{"modelApi":"anthropic","model":"m","stream":false,"prompt":"p","timeZone":"UTC","mcp":[],
 "tools":[{"name":"image_generate","description":"Draw.","parameters":{"type":"object","properties":{"prompt":{"type":"string"}}}}]}`)
	b.tools["image_generate"] = func(json.RawMessage) string {
		return `{"ok":true,"text":"drawn","image":{"data":"AQID","mimeType":"image/png"}}`
	}
	startWorker(t, b, attachmentsWorkspace(t, nil))
	turn := sessionTurn("t1", "draw")
	turn.Room = &wire.SessionRoom{Bytes: 4096, Files: 5} // less than one file's cost
	got := b.execute(turn)
	if want := (wire.SessionResult{OK: true, Text: "made", Files: []wire.ReplyFile{}}); !cmp.Equal(want, got, cmpopts.EquateEmpty()) {
		t.Fatalf("result = %+v; want %+v", got, want)
	}
	if last := model.Requests()[1].Last(); last.Text() != "drawn\n"+imageNoRoomText {
		t.Errorf("tool answer = %q", last.Text())
	}
}

// FuzzAttachmentInput checks read_attachment's and image_generate's
// handling of any model-written input: a name that passes is a safe name
// and its own basename; reference_images either come back as at most four
// images the image rule accepts, read from the attachments directory, or
// are refused with one of the fixed texts.
func FuzzAttachmentInput(f *testing.F) {
	for _, s := range []string{`{"name":"m1-0-cat.png"}`, `{"name":"../x"}`, `{"reference_images":["m1-0-cat.png"]}`,
		`{"reference_images":["a","b","c","d","e"]}`, `{"reference_images":[1]}`, `{"reference_images":"x"}`, `{"reference_images":["m1-1-a.txt"]}`} {
		f.Add(s)
	}
	ws := f.TempDir()
	os.Mkdir(filepath.Join(ws, "attachments"), 0o700)
	os.WriteFile(filepath.Join(ws, "attachments", "m1-0-cat.png"), pngBytes, 0o600)
	os.WriteFile(filepath.Join(ws, "attachments", "m1-1-a.txt"), []byte("text"), 0o600)
	f.Fuzz(func(t *testing.T, input string) {
		fields, ok := object(json.RawMessage(input))
		if !ok {
			return
		}
		if name, err := attachmentName(fields["name"]); err == nil && (!wire.ValidSafeName(name) || filepath.Base(name) != name || strings.Contains(name, "/")) {
			t.Fatalf("attachmentName accepted %q", name)
		}
		out, err := referenceImages(ws, toolInput{raw: json.RawMessage(input), fields: fields})
		if err != nil {
			if _, text := refusal(err); text != nil {
				t.Fatalf("referenceImages failed without a fixed text: %v", err)
			}
			return
		}
		if _, present := fields["reference_images"]; !present {
			return
		}
		var got struct {
			Refs []wire.Image `json:"reference_images"`
		}
		if json.Unmarshal(out, &got) != nil || len(got.Refs) > maxReferences || wire.ValidateImages(got.Refs) != nil {
			t.Fatalf("referenceImages(%s) = %.200s", input, out)
		}
		for _, im := range got.Refs {
			if im.Data != base64.StdEncoding.EncodeToString(pngBytes) {
				t.Fatalf("a reference that is not the one image of the directory: %.80s", im.Data)
			}
		}
	})
}

// The request budget measures the conversation with the images aside
// (docs/protocol.md, "Images and files" bounds those): 8 MiB of images drop no history, in either API.
func TestFitContextMeasuresImagesAside(t *testing.T) {
	big := wire.Image{Data: strings.Repeat("A", 4<<20), MIMEType: rtsandbox.MIMEPNG}
	for _, api := range []string{rtsandbox.ModelAPIAnthropic, ""} {
		a := &agent{
			model: newModelClient(modelSettings{api: api}, nil), maxPayload: 720_000, histLeft: 2, exchanges: true,
			payload: modelPayload{Model: "m", Messages: []message{
				{Role: "system", Content: "s"}, {Role: "user", Content: "before"}, {Role: "assistant", Content: "then"}, {Role: "user", Content: "now"},
			}, images: []wire.Image{big}, toolImages: map[string][]wire.Image{"c": {big}}},
		}
		if err := a.fitContext(); err != nil || len(a.payload.Messages) != 4 || len(a.payload.images) != 1 {
			t.Errorf("api %q: fitContext = %v, %d messages; want the history kept", api, err, len(a.payload.Messages))
		}
	}
}
