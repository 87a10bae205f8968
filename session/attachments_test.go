package session

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/attach"
	"github.com/rtsandbox/rtsandbox/safefetch/safefetchtest"
	"github.com/rtsandbox/rtsandbox/wire"
)

// realPNG is a real 1×1 PNG. The reference's attachment fixture fetches the
// bytes [1,2,3] and stubs prepareImage; here the host sniffs the real type
// (attach.Classify), so the fixture must start with the PNG signature and
// is a whole PNG so that no check is left out.
var realPNG = func() []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		panic(err)
	}
	return b.Bytes()
}()

// cdn serves attachments by path on loopback behind public-looking names
// (cdn.example.com) and a private one (internal.example.com), through the
// safefetch seams: the production address policy runs unchanged.
type cdn struct {
	srv     *httptest.Server
	fetches atomic.Int32
	files   map[string][]byte
	types   map[string]string
}

func newCDN(t *testing.T) *cdn {
	c := &cdn{files: map[string][]byte{}, types: map[string]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fetches.Add(1)
		data, ok := c.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if ct := c.types[r.URL.Path]; ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.Write(data)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// url is the public URL of path.
func (c *cdn) url(path string) string { return "http://cdn.example.com" + path }

// withCDN gives the fixture's runtime the CDN's loopback fetcher.
func withCDN(c *cdn) func(*Options) {
	return func(o *Options) {
		o.Fetcher = safefetchtest.Loopback(c.srv, map[string]string{"cdn.example.com": "93.184.216.34", "internal.example.com": "10.0.0.5"})
	}
}

// collectIn runs the collection of in for channel inside an admitted turn
// that then ends without running (docs/session.md, "Attachments in, reply files out" as the reference's
// collectPiAttachments is tested: the collection alone).
func (f *fixture) collectIn(t *testing.T, channel string, in rtsandbox.TurnInput) collected {
	t.Helper()
	var c collected
	_, err := f.rt.turnWith(context.Background(), TurnRequest{Binding: binding(channel, "a")}, func(tn *turn, _ *TurnRequest) (bool, error) {
		var err error
		c, err = f.rt.collect(tn, in)
		return false, err
	})
	if err != nil {
		t.Fatalf("collect: %v", err)
	}
	return c
}

// attachmentsPath is the channel's attachments directory.
func (f *fixture) attachmentsPath(channel string) string {
	return filepath.Join(f.party, Segment(rtsandbox.ChannelKey(channel)), workspaceName, attachmentName)
}

// prepared makes the channel's directories, as a first turn would.
func (f *fixture) prepared(t *testing.T, channel string) dirs {
	t.Helper()
	d, err := f.rt.s.prepare(context.Background(), rtsandbox.ChannelKey(channel))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// reasons are the failures' reasons as the model reads them.
func reasons(c collected) []string {
	var out []string
	for _, fl := range c.failures {
		r := fl.Detail
		if r == "" {
			r = fl.Reason.GuestText()
		}
		out = append(out, r)
	}
	return out
}

// The reference's test "[SEC] A symlink planted at m1-0-image.png → outside file, then two
// PNG attachments": the outside file is still "host data"; 1 failure (the
// planted name), 1 file, one image: the fetched bytes, as a PNG.
func TestSecAttachmentSymlinkPlantedAtTarget(t *testing.T) {
	c := newCDN(t)
	c.files["/1.png"], c.files["/2.png"] = realPNG, realPNG
	f := newFixture(t, withCDN(c))
	f.prepared(t, "discord:1")
	outside := filepath.Join(shortDir(t), "outside")
	if err := os.WriteFile(outside, []byte("host data"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := f.attachmentsPath("discord:1")
	if err := os.Symlink(outside, filepath.Join(dir, "m1-0-image.png")); err != nil {
		t.Fatal(err)
	}
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m1", Attachments: []rtsandbox.Attachment{
		{Name: "image.png", ContentType: "image/png", URL: c.url("/1.png")},
		{Name: "image.png", ContentType: "image/png", URL: c.url("/2.png")},
	}})
	if data, _ := os.ReadFile(outside); string(data) != "host data" {
		t.Errorf("outside file = %q; want host data", data)
	}
	want := collected{
		saved:    []attach.Saved{{Ref: attach.Ref{Index: 1}, File: "m1-1-image.png", ContentType: rtsandbox.MIMEPNG, Size: len(realPNG), Image: true}},
		failures: []attach.Failure{{Ref: attach.Ref{Index: 0}, Name: "image.png", Reason: attach.ReasonStore}},
		images:   []wire.Image{{Data: base64.StdEncoding.EncodeToString(realPNG), MIMEType: rtsandbox.MIMEPNG}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(collected{})); diff != "" {
		t.Errorf("collected (-want +got):\n%s", diff)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "m1-1-image.png")); err != nil || !bytes.Equal(data, realPNG) {
		t.Errorf("saved file = %d bytes, %v; want the fetched PNG", len(data), err)
	}
}

// The reference's test "21 attachments, the first declared at 26 MiB": fetch is called 19
// times; the failures, in order, are "larger than 25 MB (27262976 bytes)"
// and "too many attachments".
func TestAttachmentTwentyOneFirstOversize(t *testing.T) {
	c := newCDN(t)
	c.files["/a.txt"] = []byte("text")
	f := newFixture(t, withCDN(c))
	var list []rtsandbox.Attachment
	for i := range 21 {
		a := rtsandbox.Attachment{Name: fmt.Sprintf("a%d.txt", i), URL: c.url("/a.txt")}
		if i == 0 {
			a.Size = 26 << 20
		}
		list = append(list, a)
	}
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m1", Attachments: list})
	if n := c.fetches.Load(); n != 19 {
		t.Errorf("fetched %d times; want 19", n)
	}
	if diff := cmp.Diff([]string{"larger than 25 MB (27262976 bytes)", "too many attachments"}, reasons(got)); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if len(got.saved) != 19 || len(got.images) != 0 {
		t.Errorf("%d saved, %d images; want 19 and 0", len(got.saved), len(got.images))
	}
}

// The reference's test "[SEC] The attachments dir itself symlinked to an outside dir, with
// no attachments": no failures; the dir becomes a real directory; the
// outside dir stays empty.
func TestSecAttachmentDirSymlinkedOutside(t *testing.T) {
	f := newFixture(t)
	f.prepared(t, "discord:1")
	dir := f.attachmentsPath("discord:1")
	outside := shortDir(t)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m1"})
	if len(got.failures) != 0 || len(got.saved) != 0 {
		t.Errorf("collected %+v; want nothing", got)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Errorf("attachments dir = %v, %v; want a real directory", fi, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("outside dir holds %v", entries)
	}
}

// [SEC] An attachment written into a directory a guest swapped for a link
// after the last turn lands in the real directory, never through the
// link: a second message with a file.
func TestSecAttachmentDirSymlinkedOutsideWithFile(t *testing.T) {
	f := newFixture(t)
	f.prepared(t, "discord:1")
	dir := f.attachmentsPath("discord:1")
	outside := shortDir(t)
	os.Remove(dir)
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m2", Attachments: []rtsandbox.Attachment{{Name: "a.txt", Data: []byte("hi")}}})
	if len(got.saved) != 1 {
		t.Fatalf("collected %+v; want one file", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("outside dir holds %v", entries)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "m2-0-a.txt")); err != nil || string(data) != "hi" {
		t.Errorf("saved file = %q, %v", data, err)
	}
}

// [SEC] A disguised image (an HTML page named x.png and declared
// image/png) is refused before it is written: not saved, not an image,
// and the guest's reply ends with the fixed notice, whatever the model
// said.
func TestSecAttachmentDisguisedImageRefused(t *testing.T) {
	f := newFixture(t)
	html := []byte("<!doctype html><script>alert(1)</script>")
	res, err := f.rt.RunInput(context.Background(), binding("discord:1", "a"), rtsandbox.TurnInput{
		MessageID: "m1", Text: "look",
		Attachments: []rtsandbox.Attachment{{Name: "x.png", ContentType: "image/png", Data: html}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantText := "done\n\n" + rtsandbox.AttachmentsNoticeText + "\n" + fmt.Sprintf(rtsandbox.AttachmentLineFormat, 1, "", rtsandbox.AttachNotImageReason)
	if res.Text != wantText {
		t.Errorf("reply %q; want %q", res.Text, wantText)
	}
	turns := f.w.deliveredTurns()
	if len(turns) != 1 || len(turns[0].Images) != 0 {
		t.Fatalf("delivered %+v; want one turn without images", turns)
	}
	wantPrompt := "look\n\n[Attachments not saved:]\n- attachment 1 \"x.png\": " + rtsandbox.AttachNotImageReason
	if turns[0].Text != wantPrompt {
		t.Errorf("prompt %q; want %q", turns[0].Text, wantPrompt)
	}
	if entries, _ := os.ReadDir(f.attachmentsPath("discord:1")); len(entries) != 0 {
		t.Errorf("attachments dir holds %v", entries)
	}
}

// A message's attachments in the worker's prompt and images: a real PNG
// shown as an image, a text file saved, a referenced file named apart,
// each as the worker finds it under /workspace/attachments, readable by
// the worker's user (0600, its uid), and the reply files decoded.
func TestRunInputAttachments(t *testing.T) {
	c := newCDN(t)
	c.files["/notes"] = []byte("line one\n")
	c.types["/notes"] = "text/plain; charset=utf-8"
	f := newFixture(t, withCDN(c))
	res, err := f.rt.RunInput(context.Background(), binding("discord:1", "a"), rtsandbox.TurnInput{
		MessageID: "123", Text: "what is this?",
		Attachments: []rtsandbox.Attachment{
			{Name: "shot.png", Data: realPNG},
			{Name: "notes", URL: c.url("/notes")},
			{Name: "old.txt", ContentType: "TEXT/Markdown", Data: []byte("# hi"), FromReference: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := TurnResult{TurnID: res.TurnID, Text: "done", Files: []File{{Name: "art.png", Data: []byte{1, 2, 3}}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	turn := f.w.deliveredTurns()[0]
	wantPrompt := "what is this?\n\n[Attachments of this message, saved in /workspace/attachments; read one with the read_attachment tool:]\n" +
		"- \"123-0-shot.png\": image/png, " + fmt.Sprint(len(realPNG)) + " bytes; shown to you as an image\n" +
		"- \"123-1-notes\": text/plain, 9 bytes\n" +
		"- \"123-ref-0-old.txt\" (from the replied-to message): text/markdown, 4 bytes"
	if turn.Text != wantPrompt {
		t.Errorf("prompt:\n%s\nwant:\n%s", turn.Text, wantPrompt)
	}
	if diff := cmp.Diff([]wire.Image{{Data: base64.StdEncoding.EncodeToString(realPNG), MIMEType: rtsandbox.MIMEPNG}}, turn.Images); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
	uid, _ := workerUser()
	for _, name := range []string{"123-0-shot.png", "123-1-notes", "123-ref-0-old.txt"} {
		fi, err := os.Lstat(filepath.Join(f.attachmentsPath("discord:1"), name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode() != 0o600 || int(st.Uid) != uid {
			t.Errorf("%s: mode %v uid %d; want 0600 of the worker's uid %d", name, fi.Mode(), st.Uid, uid)
		}
	}
}

// The failures of a collection, each with the reference's reason for the
// model: a status outside 2xx, [SEC] a URL on a private address (never
// fetched), an empty file, a file over 25 MiB once counted, and the 50 MiB
// total; the bytes of a refused file still count toward the total.
func TestAttachmentFailures(t *testing.T) {
	c := newCDN(t)
	c.files["/big"] = make([]byte, 20<<20)
	f := newFixture(t, withCDN(c), func(o *Options) { o.TurnTimeout = time.Minute })
	over := make([]byte, rtsandbox.MaxAttachmentBytes+1)
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m1", Attachments: []rtsandbox.Attachment{
		{Name: "gone.txt", URL: c.url("/gone")},
		{Name: "secret.txt", URL: "http://internal.example.com/x"},
		{Name: "loop.txt", URL: "http://127.0.0.1/x"},
		{Name: "empty.txt", Data: []byte{}},
		{Name: "over.bin", Data: over}, // 25 MiB + 1: refused, counted
		{Name: "big1.bin", URL: c.url("/big")},
		{Name: "big2.bin", URL: c.url("/big")}, // 25 + 1 + 20 + 20 > 50 MiB
	}})
	want := []string{
		"download failed with HTTP 404", "download failed", "download failed", "the file is empty",
		"larger than 25 MB (26214401 bytes)", "attachments exceed 50 MB in total",
	}
	if diff := cmp.Diff(want, reasons(got)); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if len(got.saved) != 1 || got.saved[0].File != "m1-5-big1.bin" {
		t.Errorf("saved %+v; want big1.bin alone", got.saved)
	}
	if n := c.fetches.Load(); n != 3 {
		t.Errorf("the CDN served %d requests; want 3 (the private and loopback URLs never fetched)", n)
	}
}

// docs/protocol.md, "Images and files" through the collection: at most eight images go to the model; a
// ninth is saved and named in the prompt and the guest's notice as not
// shown.
func TestAttachmentImageBudget(t *testing.T) {
	f := newFixture(t)
	var list []rtsandbox.Attachment
	for i := range 9 {
		list = append(list, rtsandbox.Attachment{Name: fmt.Sprintf("p%d.png", i), Data: realPNG})
	}
	res, err := f.rt.RunInput(context.Background(), binding("discord:1", "a"), rtsandbox.TurnInput{MessageID: "m1", Text: "nine", Attachments: list})
	if err != nil {
		t.Fatal(err)
	}
	turn := f.w.deliveredTurns()[0]
	if len(turn.Images) != rtsandbox.MaxImages {
		t.Errorf("%d images; want %d", len(turn.Images), rtsandbox.MaxImages)
	}
	if !strings.HasSuffix(turn.Text, `- "m1-8-p8.png": image/png, `+fmt.Sprint(len(realPNG))+" bytes; "+attach.ReasonImageLimit.GuestText()) {
		t.Errorf("prompt does not name the ninth image as not shown:\n%s", turn.Text)
	}
	if want := fmt.Sprintf(rtsandbox.AttachmentLineFormat, 9, "", attach.ReasonImageLimit.GuestText()); !strings.HasSuffix(res.Text, "\n"+want) {
		t.Errorf("reply %q lacks %q", res.Text, want)
	}
}

// A message id that is no valid prefix gets a fresh safe one, which the
// operator log names; the files are saved under it.
func TestAttachmentMessageIDReplaced(t *testing.T) {
	f := newFixture(t)
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "../m 1", Attachments: []rtsandbox.Attachment{{Name: "a.txt", Data: []byte("x")}}})
	recs := f.log.find("attachment message id replaced")
	if len(recs) != 1 || len(got.saved) != 1 {
		t.Fatalf("log %+v, saved %+v; want one record and one file", recs, got.saved)
	}
	prefix, _ := recs[0].attrs["prefix"].(string)
	if !attach.ValidPrefix(prefix+refPrefixSuffix) || got.saved[0].File != prefix+"-0-a.txt" {
		t.Errorf("prefix %q, file %q", prefix, got.saved[0].File)
	}
}

// A message with no text of its own whose files were all refused runs no
// model call: the guest gets the fixed notice alone.
func TestRunInputNothingUsable(t *testing.T) {
	f := newFixture(t)
	res, err := f.rt.RunInput(context.Background(), binding("discord:1", "a"), rtsandbox.TurnInput{
		MessageID: "m1", Attachments: []rtsandbox.Attachment{{Name: "x.gif", Data: []byte("GIF? no")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := rtsandbox.AttachmentsNoticeText + "\n" + fmt.Sprintf(rtsandbox.AttachmentLineFormat, 1, "", rtsandbox.AttachNotImageReason)
	if res.Text != want || len(res.Files) != 0 {
		t.Errorf("result %+v; want the notice alone", res)
	}
	if n := len(f.w.deliveredTurns()); n != 0 {
		t.Errorf("%d turns reached the worker; want 0", n)
	}
}

// The prompt stays within 100,000 units: a text at the limit is cut to
// make room for the attachments block, which is kept whole.
func TestRunInputTextBound(t *testing.T) {
	f := newFixture(t)
	text := strings.Repeat("x", rtsandbox.MaxSessionText)
	if _, err := f.rt.RunInput(context.Background(), binding("discord:1", "a"), rtsandbox.TurnInput{
		MessageID: "m1", Text: text, Attachments: []rtsandbox.Attachment{{Name: "a.txt", Data: []byte("x")}},
	}); err != nil {
		t.Fatal(err)
	}
	got := f.w.deliveredTurns()[0].Text
	if n := rtsandbox.UTF16Len(got); n > rtsandbox.MaxSessionText {
		t.Errorf("prompt of %d units", n)
	}
	if !strings.Contains(got, "x […]\n\n[Attachments of this message") || !strings.HasSuffix(got, `- "m1-0-a.txt": application/octet-stream, 1 bytes`) {
		t.Errorf("prompt ends %q", got[len(got)-200:])
	}
}

// [SEC] An attachment URL on a private, loopback or metadata address, or
// with credentials or another scheme, is never fetched: safefetch's
// production policy runs behind the test seams.
func TestSecAttachmentPrivateURLNeverFetched(t *testing.T) {
	c := newCDN(t)
	f := newFixture(t, withCDN(c))
	var list []rtsandbox.Attachment
	for _, u := range []string{"http://internal.example.com/x", "http://127.0.0.1/x", "http://169.254.169.254/latest/meta-data",
		"http://[::1]/x", "http://0x7f.1/x", "http://user:pw@cdn.example.com/x", "file:///etc/passwd", "gopher://cdn.example.com/x"} {
		list = append(list, rtsandbox.Attachment{Name: "x.txt", URL: u})
	}
	got := f.collectIn(t, "discord:1", rtsandbox.TurnInput{MessageID: "m1", Attachments: list})
	if len(got.saved) != 0 || len(got.failures) != len(list) {
		t.Fatalf("collected %+v; want every one refused", got)
	}
	for _, fl := range got.failures {
		if fl.Reason != attach.ReasonDownload {
			t.Errorf("failure %+v; want a failed download", fl)
		}
	}
	if n := c.fetches.Load(); n != 0 {
		t.Errorf("the server was reached %d times", n)
	}
}
