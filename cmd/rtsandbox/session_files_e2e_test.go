package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// End to end with real Docker through `rtsandbox serve` and its chat
// API (issue 13, "How we will know it works"): a guest's image reaches the
// stand-in model as an image part, a file in the worker's outbox comes
// back as a reply file, an oversize file is refused by the API and a
// disguised one by the runtime, and a sealed channel keeps its notice.
//
// The file out is one the model writes: the stand-in model calls the
// worker's write_file tool, the worker saves it in the turn's outbox and
// collects it (no-follow, bounds), and the host checks it again.

// apiFile is one entry of a message's attachments in the chat API.
type apiFile struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Data     string `json:"data"`
}

// apiReplies is the wait answer with the reply files.
type apiReplies struct {
	Replies []struct {
		Chunks []string         `json:"chunks"`
		Files  []rtsandbox.File `json:"files"`
	} `json:"replies"`
}

// sayFiles posts text with files to channel as alice and waits for the
// turn; it returns the status and the body.
func (s *server) sayFiles(t *testing.T, channel, text string, files []apiFile) (int, string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"channel": channel, "author": map[string]string{"id": "alice", "name": "Alice"},
		"text": text, "mentions_bot": true, "wait": true, "attachments": files})
	if err != nil {
		t.Fatal(err)
	}
	return s.call(t, "POST", "/api/v1/messages", serveGuestToken, string(body))
}

// sayFilesOK is sayFiles requiring 200; it returns the reply's text (its
// chunks joined) and its files.
func (s *server) sayFilesOK(t *testing.T, channel, text string, files []apiFile) (string, []rtsandbox.File) {
	t.Helper()
	code, body := s.sayFiles(t, channel, text, files)
	var a apiReplies
	if code != 200 || json.Unmarshal([]byte(body), &a) != nil {
		t.Fatalf("POST %q with files = %d %s\nserve:\n%s", text, code, body, s.out.String())
	}
	var chunks []string
	var out []rtsandbox.File
	for _, r := range a.Replies {
		chunks = append(chunks, r.Chunks...)
		out = append(out, r.Files...)
	}
	return strings.Join(chunks, "\n"), out
}

// filesModel answers "make a report" by having the worker call
// write_file with report as report.csv and, once the tool says it saved
// it, with "Here is the table."; any other turn gets "Noted.".
func filesModel(t *testing.T, report []byte) *fakemodel.Server {
	saved := fmt.Sprintf("Saved report.csv (%d bytes); it will be attached to your reply.", len(report))
	return fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if last := req.Last(); last.Role == "tool" {
				if last.Text() != saved {
					t.Errorf("write_file answered %q; want %q", last.Text(), saved)
					return fakemodel.Response{Content: "no report"}
				}
				return fakemodel.Response{Content: "Here is the table."}
			}
			if !strings.Contains(req.UserText(), "make a report") {
				return fakemodel.Response{Content: "Noted."}
			}
			return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{
				fakemodel.Call("write_file", map[string]string{"name": "report.csv", "content": string(report)})}}
		}))
}

// oversizeData is standard padded base64 of one byte over 25 MiB (zeros).
func oversizeData() string {
	n := rtsandbox.MaxAttachmentBytes + 1
	return strings.Repeat("A", n/3*4) + []string{"", "AA==", "AAA="}[n%3]
}

// TestSessionServeHTTPFiles, through one serve with a session channel
// (http:lobby) and a sealed one (http:plain):
//   - a real PNG posted as base64 reaches the stand-in model as an image
//     part with its bytes, and the file the model writes with write_file
//     comes back in the wait answer's files and on the reply event;
//   - an attachment over 25 MiB decoded is refused with 400 naming the
//     rule, and no turn runs;
//   - HTML named x.png declared image/png reaches the runtime, which
//     refuses it: the model sees no image part and the reply ends with the
//     fixed notice;
//   - a sealed channel's model input ends with the attachments notice,
//     byte for byte as before issue 13.
func TestSessionServeHTTPFiles(t *testing.T) {
	parallelServe(t)
	tag, _ := sessionDocker(t)
	shot, report := pngOf(t, 2, 2), []byte("a,b\n1,2\n")
	model := filesModel(t, report)
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\nchannels_profile: {'http:plain': default}\n")
	s := startServe(t, addr, "--config", cfg)
	ev, stopEvents := s.subscribe(t, "?channel=http:lobby")
	defer stopEvents()

	// Image in, file out.
	text, files := s.sayFilesOK(t, "http:lobby", "make a report", []apiFile{
		{Name: "shot.png", MIMEType: "image/png", Data: base64.StdEncoding.EncodeToString(shot)}})
	if text != "Here is the table." {
		t.Errorf("reply = %q; want the model's text", text)
	}
	if diff := cmp.Diff([]rtsandbox.File{{Name: "report.csv", Data: report}}, files); diff != "" {
		t.Errorf("wait answer's files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: base64.StdEncoding.EncodeToString(shot)}}, model.Requests()[0].Images()); diff != "" {
		t.Errorf("the image did not reach the model as an image part (-want +got):\n%s", diff)
	}
	event := `"files":[{"name":"report.csv","data":"` + base64.StdEncoding.EncodeToString(report) + `"}]`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ev.String(), event) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(ev.String(), event) {
		t.Errorf("no reply event with %s:\n%s", event, ev.String())
	}

	// Oversize: the API refuses it before any turn.
	asked := len(model.Requests()) // the write_file call and the answer after it
	code, body := s.sayFiles(t, "http:lobby", "too big", []apiFile{{Name: "big.png", MIMEType: "image/png", Data: oversizeData()}})
	if code != 400 || !strings.Contains(body, "attachments[0].data: at most 25 MiB decoded") {
		t.Errorf("oversize attachment = %d %s; want 400 naming the 25 MiB rule", code, body)
	}
	if n := len(model.Requests()); n != asked {
		t.Errorf("model requests after the oversize post = %d; want still %d", n, asked)
	}

	// Disguised: the runtime refuses it with the fixed notice.
	html := []byte("<!doctype html><script>alert(1)</script>")
	text, files = s.sayFilesOK(t, "http:lobby", "what is this?", []apiFile{
		{Name: "x.png", MIMEType: "image/png", Data: base64.StdEncoding.EncodeToString(html)}})
	notice := rtsandbox.AttachmentsNoticeText + "\n" + fmt.Sprintf(rtsandbox.AttachmentLineFormat, 1, "", rtsandbox.AttachNotImageReason)
	if want := "Noted.\n\n" + notice; text != want || len(files) != 0 {
		t.Errorf("reply to the disguised file = %q, files %v; want %q and none", text, files, want)
	}
	last := model.Requests()[len(model.Requests())-1]
	for _, im := range last.Images() {
		if im.Data == base64.StdEncoding.EncodeToString(html) {
			t.Errorf("the disguised file reached the model as an image part: %+v", im)
		}
	}
	if !strings.Contains(last.UserText(), `attachment 1 "x.png": `+rtsandbox.AttachNotImageReason) {
		t.Errorf("model input lacks the refusal of x.png:\n%s", last.UserText())
	}

	// Sealed: the notice, byte for byte, and no image.
	s.on(t, "http:plain")
	if text, files = s.sayFilesOK(t, "http:plain", "look at this", []apiFile{
		{Name: "shot.png", MIMEType: "image/png", Data: base64.StdEncoding.EncodeToString(shot)}}); text != "Noted." || len(files) != 0 {
		t.Errorf("sealed reply = %q, files %v; want the model's text and none", text, files)
	}
	last = model.Requests()[len(model.Requests())-1]
	if got, want := last.UserText(), "look at this\n"+rtsandbox.AttachmentsUnsupportedText; got != want {
		t.Errorf("sealed model input = %q; want %q", got, want)
	}
	if ims := last.Images(); len(ims) != 0 {
		t.Errorf("sealed model input has image parts %+v; want none", ims)
	}
	s.stopOK(t)
}
