package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// withInput makes the fixture's router run turns through rt.
func withInput(rt *fakeRuntime) func(*router.Options) {
	return func(o *router.Options) { o.Runtime = rt }
}

// b64 is the standard base64 of n bytes.
func b64(n int) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA5, 0x17, 0x3C}, n/3+1)[:n])
}

// entry is one attachments entry as JSON. data goes in as it is (base64
// needs no escaping; the tests of bad data use JSON-safe text).
func entry(name, mimeType, data string) string {
	return `{"name":` + jsonString(name) + `,"mime_type":` + jsonString(mimeType) + `,"data":"` + data + `"}`
}

// withAttachments is a message body by alice in lobby with the raw
// "attachments" value.
func withAttachments(text, attachments string) string {
	return `{"channel":"http:lobby","author":{"id":"alice"},"text":` + jsonString(text) + `,"mentions_bot":true,"attachments":` + attachments + `}`
}

func list(entries ...string) string { return "[" + strings.Join(entries, ",") + "]" }

const base64Rule = "must be standard base64 with padding (A-Z a-z 0-9 + /, a multiple of 4 characters, = only at the end)"

// bodyRefusal is a refused body and its answer.
type bodyRefusal struct {
	name, body, want string
	code             int
}

// pngEntry is a small valid entry.
var pngEntry = entry("a.png", "image/png", "iVBORw==")

// attachmentValidationTests are refused attachment bodies and their
// answers; they also seed FuzzDecodeAttachments.
var attachmentValidationTests = []bodyRefusal{
	// [SEC] The count is bounded before the 21st entry is read (docs/session.md, "Attachments in, reply files out").
	{"sec-too-many-attachments", withAttachments("hi", list(slices.Repeat([]string{pngEntry}, 21)...)), "attachments: at most 20 entries", 400},
	// [SEC] The old bound holds for everything outside attachment data.
	{"sec-text-over-512-kib-beside-attachments", `{"channel":"http:lobby","author":{"id":"alice"},"attachments":` + list(pngEntry) + `,"reference_text":"` + strings.Repeat("a", MaxBodyBytes) + `","text":"hi"}`, textBodyTooLarge, 413},
	// [SEC] Malformed base64 is refused, never decoded leniently.
	{"sec-base64-url-alphabet", withAttachments("hi", list(entry("a", "text/plain", "ab-_"))), "attachments[0].data: " + base64Rule, 400},
	{"sec-base64-unpadded", withAttachments("hi", list(entry("a", "text/plain", "abc"))), "attachments[0].data: " + base64Rule, 400},
	{"sec-base64-padding-inside", withAttachments("hi", list(entry("a", "text/plain", "ab==abcd"))), "attachments[0].data: " + base64Rule, 400},
	{"sec-base64-three-pads", withAttachments("hi", list(entry("a", "text/plain", "a==="))), "attachments[0].data: " + base64Rule, 400},
	{"sec-base64-newline", withAttachments("hi", list(entry("a", "text/plain", `YWJj\nZGVm`))), "attachments[0].data: " + base64Rule, 400},
	{"sec-base64-space", withAttachments("hi", list(entry("a", "text/plain", "YWJj ZGVm"))), "attachments[0].data: " + base64Rule, 400},
	// [SEC] A guest cannot make the host fetch a URL of its choosing, nor
	// pass a file off as the replied-to message's.
	{"sec-url-smuggling", withAttachments("hi", `[{"name":"a.png","mime_type":"image/png","data":"iVBORw==","url":"http://169.254.169.254/"}]`), `unknown key "attachments[0].url"`, 400},
	{"sec-from-reference-smuggling", withAttachments("hi", `[{"name":"a.png","mime_type":"image/png","data":"iVBORw==","from_reference":true}]`), `unknown key "attachments[0].from_reference"`, 400},
	{"empty-data", withAttachments("hi", list(entry("a", "text/plain", ""))), "attachments[0].data: must not be empty", 400},
	{"data-not-string", withAttachments("hi", `[{"name":"a","mime_type":"text/plain","data":12}]`), "attachments[0].data: must be a string", 400},
	{"data-null", withAttachments("hi", `[{"name":"a","mime_type":"text/plain","data":null}]`), "attachments[0].data: must be a string", 400},
	{"missing-data", withAttachments("hi", `[{"name":"a","mime_type":"text/plain"}]`), "attachments[0].data: required", 400},
	{"attachments-not-array", withAttachments("hi", `{}`), "attachments: must be an array", 400},
	{"attachments-null", withAttachments("hi", `null`), "attachments: must be an array", 400},
	{"entry-not-object", withAttachments("hi", `["a.png"]`), "attachments[0]: must be an object", 400},
	{"duplicate-entry-key", withAttachments("hi", `[{"name":"a","mime_type":"text/plain","data":"YQ==","data":"Yg=="}]`), `duplicate key "attachments[0].data"`, 400},
	{"second-entry-at-fault", withAttachments("hi", list(pngEntry, `{"name":"b"}`)), "attachments[1].mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)", 400},
	{"missing-name", withAttachments("hi", `[{"mime_type":"text/plain","data":"YQ=="}]`), "attachments[0].name: required, 1 to 255 characters of valid UTF-8", 400},
	{"empty-name", withAttachments("hi", list(entry("", "text/plain", "YQ=="))), "attachments[0].name: required, 1 to 255 characters of valid UTF-8", 400},
	{"name-too-long", withAttachments("hi", list(entry(strings.Repeat("n", 256), "text/plain", "YQ=="))), "attachments[0].name: required, 1 to 255 characters of valid UTF-8", 400},
	{"name-not-string", withAttachments("hi", `[{"name":1,"mime_type":"text/plain","data":"YQ=="}]`), "attachments[0].name: must be a string", 400},
	{"missing-mime-type", withAttachments("hi", `[{"name":"a","data":"YQ=="}]`), "attachments[0].mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)", 400},
	{"mime-type-without-subtype", withAttachments("hi", list(entry("a", "image", "YQ=="))), "attachments[0].mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)", 400},
	{"mime-type-garbage", withAttachments("hi", list(entry("a", "not a type", "YQ=="))), "attachments[0].mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)", 400},
	{"mime-type-too-long", withAttachments("hi", list(entry("a", "text/"+strings.Repeat("x", 251), "YQ=="))), "attachments[0].mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)", 400},
	{"blank-text-and-no-attachments", withAttachments(" ", `[]`), "text: required and not blank", 400},
}

// attachmentSizeTests are the size bounds at their real values (docs/session.md, "Attachments in, reply files out"),
// checked on the base64 text before it is decoded: tens of MiB each, so
// they seed no fuzzing.
func attachmentSizeTests() []bodyRefusal {
	const mib = 1 << 20
	return []bodyRefusal{
		{"sec-attachment-over-25-mib", withAttachments("hi", list(entry("big.bin", "application/octet-stream", b64(25*mib+1)))), "attachments[0].data: at most 25 MiB decoded", 400},
		{"sec-attachment-over-25-mib-unpadded-at-max-length", withAttachments("hi", list(entry("big.bin", "application/octet-stream", strings.Repeat("A", maxAttachmentChars)))), "attachments[0].data: at most 25 MiB decoded", 400},
		{"sec-attachments-over-50-mib-in-total", withAttachments("hi", list(
			entry("a.bin", "application/octet-stream", b64(25*mib)),
			entry("b.bin", "application/octet-stream", b64(25*mib)),
			entry("c.bin", "application/octet-stream", b64(1024)))), "attachments: at most 50 MiB decoded in total", 400},
	}
}

func TestAttachmentValidation(t *testing.T) {
	testRefusals(t, attachmentValidationTests)
}

// TestAttachmentSizeBounds: docs/session.md, "Attachments in, reply files out"'s bounds at their real sizes (tens of
// MiB of JSON each: slow under the race detector).
func TestAttachmentSizeBounds(t *testing.T) {
	testRefusals(t, attachmentSizeTests())
}

// testRefusals posts each body and wants its refusal; nothing reaches the
// runtime and nothing stays reserved.
func testRefusals(t *testing.T, tests []bodyRefusal) {
	t.Helper()
	f := newFixture(t, nil, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := f.do(t, "POST", "/api/v1/messages", guestToken, tt.body)
			got := decode[errorBody](t, body)
			if code != tt.code || got.Error != tt.want {
				t.Errorf("POST = %d %q; want %d %q", code, got.Error, tt.code, tt.want)
			}
		})
	}
	if calls := f.rt.Calls(); len(calls) != 0 {
		t.Errorf("refused messages reached the runtime: %v", calls)
	}
	if n := f.api.attached.inUse(); n != 0 {
		t.Errorf("refused messages left %d bytes reserved", n)
	}
}

// Accepted attachments become router.Message.Files with their bytes: the
// name untouched (path separators and all: the runtime sanitises it), the
// declared type as sent, the size measured; a message with attachments
// may have no text; base64 may escape '/' as JSON allows.
func TestAttachmentsBecomeFiles(t *testing.T) {
	tests := []struct {
		name, text, attachments string
		want                    []rtsandbox.Attachment
	}{
		{
			name: "two-files", text: "look",
			attachments: list(entry("shot.png", "image/png", "iVBORw0KGgo="), entry("notes.txt", "text/plain; charset=utf-8", "aGk=")),
			want: []rtsandbox.Attachment{
				{Name: "shot.png", ContentType: "image/png", Size: 8, Data: []byte("\x89PNG\r\n\x1a\n")},
				{Name: "notes.txt", ContentType: "text/plain; charset=utf-8", Size: 2, Data: []byte("hi")},
			},
		},
		{
			// [SEC] Passed through untouched for the runtime to sanitise.
			name: "sec-name-with-path-separators-passed-through", text: "look",
			attachments: list(entry("../../etc/passwd", "text/plain", "aGk="), entry(`..\win.ini`, "text/plain", "aGk=")),
			want: []rtsandbox.Attachment{
				{Name: "../../etc/passwd", ContentType: "text/plain", Size: 2, Data: []byte("hi")},
				{Name: `..\win.ini`, ContentType: "text/plain", Size: 2, Data: []byte("hi")},
			},
		},
		{
			name: "blank-text-with-attachment", text: "",
			attachments: list(entry("a.bin", "application/octet-stream", "/w==")),
			want:        []rtsandbox.Attachment{{Name: "a.bin", ContentType: "application/octet-stream", Size: 1, Data: []byte{0xFF}}},
		},
		{
			name: "escaped-slash-in-base64", text: "x",
			attachments: `[{"name":"a.bin","mime_type":"application/octet-stream","data":"\/w=="}]`,
			want:        []rtsandbox.Attachment{{Name: "a.bin", ContentType: "application/octet-stream", Size: 1, Data: []byte{0xFF}}},
		},
		{
			name: "empty-list", text: "x", attachments: `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &fakeRuntime{Turn: echo}
			f := newFixture(t, rt, nil, withInput(rt))
			body := strings.TrimSuffix(withAttachments(tt.text, tt.attachments), "}") + `,"wait":true}`
			code, body := f.do(t, "POST", "/api/v1/messages", guestToken, body)
			if code != http.StatusOK {
				t.Fatalf("POST = %d %s; want 200", code, body)
			}
			calls := rt.Calls()
			if len(calls) != 1 {
				t.Fatalf("runtime calls = %+v; want one", calls)
			}
			if diff := cmp.Diff(tt.want, calls[0].Attachments); diff != "" {
				t.Errorf("attachments (-want +got):\n%s", diff)
			}
			if calls[0].Text != tt.text || !strings.HasPrefix(calls[0].MessageID, "m_") {
				t.Errorf("call = %+v; want the text %q without notice, by message id", calls[0], tt.text)
			}
			if n := f.api.attached.inUse(); n != 0 {
				t.Errorf("settled message left %d bytes reserved", n)
			}
		})
	}
}

// The largest message (two 25 MiB attachments, 50 MiB in all) fits the
// default request bound; MaxRequestBytes can lower it (413 at once from
// Content-Length).
func TestAttachmentRequestBound(t *testing.T) {
	const mib = 1 << 20
	largest := withAttachments("hi", list(entry("a.bin", "application/octet-stream", b64(25*mib)), entry("b.bin", "application/octet-stream", b64(25*mib))))
	if int64(len(largest)) > DefaultMaxRequestBytes {
		t.Fatalf("the largest message is %d bytes; DefaultMaxRequestBytes %d", len(largest), DefaultMaxRequestBytes)
	}
	rt := &fakeRuntime{Turn: echo}
	f := newFixture(t, rt, nil, withInput(rt))
	if code, body := f.do(t, "POST", "/api/v1/messages", guestToken, largest); code != http.StatusAccepted {
		t.Errorf("largest message = %d %s; want 202", code, body)
	}
	small := newFixture(t, nil, func(o *Options) { o.MaxRequestBytes = MaxBodyBytes + 1024 })
	code, body := small.do(t, "POST", "/api/v1/messages", guestToken, withAttachments("hi", list(entry("a.bin", "application/octet-stream", b64(MaxBodyBytes)))))
	if code != http.StatusRequestEntityTooLarge || decode[errorBody](t, body).Error != textBodyTooLarge {
		t.Errorf("over MaxRequestBytes = %d %s; want 413", code, body)
	}
	for _, bad := range []int64{MaxBodyBytes - 1, DefaultMaxRequestBytes + 1} {
		if _, err := New(Options{Router: f.router, Token: func() string { return "t" }, MaxRequestBytes: bad}); err == nil {
			t.Errorf("New(MaxRequestBytes %d) = nil; want an error", bad)
		}
	}
}

// [SEC] What the API holds is bounded: a body past MaxBodyBytes needs an
// upload slot (none free → 503), and the decoded attachments of the
// messages it holds stay within MaxHeldAttachmentBytes (past it → 503);
// a settled message gives its bytes back.
func TestAttachmentHoldingBounded(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return rtsandbox.Reply{OK: true, Text: "seen"}, nil
	}}
	f := newFixture(t, rt, nil, withInput(rt))
	f.api.attached.max = 1000 // a small bound instead of 200 MiB
	events := f.subscribe(t, "")
	code, body := f.do(t, "POST", "/api/v1/messages", guestToken, withAttachments("hi", list(entry("a.bin", "application/octet-stream", b64(600)))))
	if code != http.StatusAccepted {
		t.Fatalf("first = %d %s; want 202", code, body)
	}
	id := decode[acceptedResponse](t, body).ID
	over := withAttachments("hi", list(entry("b.bin", "application/octet-stream", b64(300)), entry("c.bin", "application/octet-stream", b64(300))))
	code, body = f.do(t, "POST", "/api/v1/messages", guestToken, over)
	if code != http.StatusServiceUnavailable || decode[errorBody](t, body).Error != textAttachmentsHeld {
		t.Errorf("past the held bound = %d %s; want 503 %q", code, body, textAttachmentsHeld)
	}
	if n := f.api.attached.inUse(); n != 600 {
		t.Errorf("held %d bytes; want the first message's 600", n)
	}
	close(release)
	events.until(t, id)
	if n := f.api.attached.inUse(); n != 0 {
		t.Errorf("the settled message still holds %d bytes", n)
	}
	if code, body := f.do(t, "POST", "/api/v1/messages", guestToken, over); code != http.StatusAccepted {
		t.Errorf("after the first settled = %d %s; want 202", code, body)
	}

	// Upload slots: with none, a body past MaxBodyBytes is refused while
	// a small message still goes through.
	g := newFixture(t, nil, nil)
	for range cap(g.api.uploads) {
		g.api.uploads <- struct{}{}
	}
	code, body = g.do(t, "POST", "/api/v1/messages", guestToken, withAttachments("hi", list(entry("a.bin", "application/octet-stream", b64(MaxBodyBytes)))))
	if code != http.StatusServiceUnavailable || decode[errorBody](t, body).Error != textUploadsBusy {
		t.Errorf("no upload slot = %d %s; want 503 %q", code, body, textUploadsBusy)
	}
	if code, body := g.post(t, "small", ""); code != http.StatusAccepted {
		t.Errorf("small message without a slot = %d %s; want 202", code, body)
	}
	for range cap(g.api.uploads) {
		<-g.api.uploads
	}
}

// A successful turn's files reach the client: on the reply of the wait
// answer, and on the last reply event only, as {"name","data"} with
// standard padded base64; a failed turn's never do.
func TestReplyFilesOnTheWire(t *testing.T) {
	para := strings.Repeat("p", 1900)
	tests := []struct {
		name       string
		run        func(context.Context, turnCall) (rtsandbox.Reply, error)
		wantChunks []string
		wantFiles  string // the files JSON of the reply; "" for none
	}{
		{
			name: "files-on-the-last-chunk",
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: true, Text: para + "\n\n" + para}, nil
			},
			wantChunks: []string{para, para},
			wantFiles:  `[{"name":"report.csv","data":"YSxiCjEsMgo="},{"name":"shot.png","data":"iVBORw0KGgo="}]`,
		},
		{
			name: "files-without-text",
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: true, Text: " "}, nil
			},
			wantChunks: []string{""},
			wantFiles:  `[{"name":"report.csv","data":"YSxiCjEsMgo="},{"name":"shot.png","data":"iVBORw0KGgo="}]`,
		},
		{
			name:       "sec-failed-turn-posts-no-file",
			run:        func(context.Context, turnCall) (rtsandbox.Reply, error) { return rtsandbox.Reply{OK: false}, nil },
			wantChunks: []string{rtsandbox.TurnFailedText},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &fakeRuntime{Turn: tt.run, Files: func(turnCall) []rtsandbox.File {
				return []rtsandbox.File{{Name: "report.csv", Data: []byte("a,b\n1,2\n")}, {Name: "shot.png", Data: []byte("\x89PNG\r\n\x1a\n")}}
			}}
			f := newFixture(t, rt, nil, withInput(rt))
			events := f.subscribe(t, "")
			code, body := f.post(t, "go", `,"wait":true`)
			if code != http.StatusOK {
				t.Fatalf("POST = %d %s", code, body)
			}
			var answer struct {
				ID      string            `json:"id"`
				Replies []json.RawMessage `json:"replies"`
			}
			if err := json.Unmarshal([]byte(body), &answer); err != nil || len(answer.Replies) != 1 {
				t.Fatalf("wait answer %s: %v", body, err)
			}
			wantReply := `{"chunks":` + mustJSON(t, tt.wantChunks)
			if tt.wantFiles != "" {
				wantReply += `,"files":` + tt.wantFiles
			}
			wantReply += "}"
			if got := string(answer.Replies[0]); got != wantReply {
				t.Errorf("wait reply = %s; want %s", got, wantReply)
			}
			var files []string
			for _, e := range events.until(t, answer.ID) {
				if e.Type != EventReply {
					continue
				}
				files = append(files, string(mustJSON(t, e.Data.Files)))
			}
			want := make([]string, len(tt.wantChunks))
			for i := range want {
				want[i] = "null"
			}
			if tt.wantFiles != "" {
				want[len(want)-1] = tt.wantFiles
			}
			if diff := cmp.Diff(want, files); diff != "" {
				t.Errorf("files per reply event (-want +got):\n%s", diff)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fileEvent is a reply event with one file of n bytes.
func fileEvent(i, n int) Event {
	return Event{Type: EventReply, Channel: lobby, MessageID: fmt.Sprintf("m%d", i), Files: []File{{Name: "f.bin", Data: make([]byte, n)}}}
}

// [SEC] The hub encodes an event with files once, shares that encoding
// between streams, and bounds what it holds for them: publishing past
// MaxEventFileBytes drops the streams holding the most, and what they
// held is let go; written events are let go too, so the count returns to
// zero.
func TestHubBoundsFileEvents(t *testing.T) {
	one := int64(len(mustJSON(t, fileEvent(0, 1000))))
	h := newHub(16, 4, 3*one)
	slow, _ := h.subscribe("")
	fast, _ := h.subscribe("")
	h.publish(fileEvent(0, 1000))
	a, b := <-fast.events, <-slow.events
	if &a.wire[0] != &b.wire[0] {
		t.Error("two streams got two encodings of one event")
	}
	if a.Files != nil {
		t.Error("buffered event keeps its files besides the encoding")
	}
	h.taken(fast, a)
	h.written(a)
	h.taken(slow, b)
	h.written(b)
	if got := h.held(); got != 0 {
		t.Fatalf("held %d after both wrote the event; want 0", got)
	}

	for i := 1; i <= 3; i++ { // slow reads nothing; fast keeps up
		h.publish(fileEvent(i, 1000))
		e := <-fast.events
		h.taken(fast, e)
		h.written(e)
	}
	if got := h.held(); got != 3*one {
		t.Errorf("held %d with three events waiting for slow; want %d", got, 3*one)
	}
	h.publish(fileEvent(4, 1000)) // past the bound: slow goes
	n := 0
	for range slow.events {
		n++
	}
	if n != 0 || !slow.overflow {
		t.Errorf("slow kept %d events, overflow %v; want dropped and drained", n, slow.overflow)
	}
	e := <-fast.events
	h.taken(fast, e)
	h.written(e)
	if got := h.held(); got != 0 {
		t.Errorf("held %d after slow was dropped and fast wrote all; want 0", got)
	}

	// A stream that leaves with events in its buffer lets them go.
	h.publish(fileEvent(5, 1000))
	h.unsubscribe(fast)
	if got := h.held(); got != 0 {
		t.Errorf("held %d after the last stream left; want 0", got)
	}
	h.close()
}

// A body takes an upload slot only once it passes MaxBodyBytes, then gets
// the upload's time to arrive (extend, once); without a free slot its
// read fails; release frees the slot.
func TestUploadMeterTakesOneSlotPastTheBound(t *testing.T) {
	slots := make(chan struct{}, 1)
	extended := 0
	m := &uploadMeter{r: strings.NewReader(strings.Repeat("x", MaxBodyBytes+10)), slots: slots, extend: func() { extended++ }}
	if _, err := io.CopyN(io.Discard, m, MaxBodyBytes); err != nil || len(slots) != 0 || extended != 0 {
		t.Fatalf("at the bound: err %v, slots %d, extended %d; want no slot yet", err, len(slots), extended)
	}
	if _, err := io.Copy(io.Discard, m); err != nil || len(slots) != 1 || extended != 1 {
		t.Fatalf("past the bound: err %v, slots %d, extended %d; want one slot, extended once", err, len(slots), extended)
	}
	busy := &uploadMeter{r: strings.NewReader(strings.Repeat("x", MaxBodyBytes+10)), slots: slots}
	if _, err := io.Copy(io.Discard, busy); !errors.Is(err, errUploadsBusy) {
		t.Errorf("without a free slot: %v; want errUploadsBusy", err)
	}
	busy.release()
	m.release()
	m.release()
	if len(slots) != 0 {
		t.Errorf("release left %d slots taken", len(slots))
	}
}
