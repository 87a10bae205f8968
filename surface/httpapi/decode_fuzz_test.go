package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// FuzzDecodeMessage feeds the strict decoder and the message validation
// whatever a guest could post (bodies of up to MaxBodyBytes). Neither may panic; a refusal names the key
// at fault in a bounded text; what is accepted is valid JSON and becomes a
// router message within the API's limits.
func FuzzDecodeMessage(f *testing.F) {
	for _, tt := range messageValidationTests {
		if len(tt.body) <= 4096 {
			f.Add(tt.body)
		}
	}
	f.Add(`{"channel":"http:lobby","author":{"id":"alice","name":"Alice","bot":false},"text":"hi","mentions_bot":true,"replies_to_bot":false,"is_direct":false,"reference_text":"q","wait":true}`)
	f.Add(`{"author":{"author":{}}}`)
	f.Add(`{"channel":"http:lobby","author":{"id":"alice"},"text":"\ud83d"}`)
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/messages", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		d, status, text := newDecoder(httptest.NewRecorder(), r)
		if d == nil {
			t.Fatalf("newDecoder refused a small JSON body: %d %s", status, text)
		}
		res := &reservation{b: &budget{max: DefaultMaxHeldAttachmentBytes}}
		defer res.release()
		req, ok := decodeFuzzed(t, d, res)
		if !ok {
			return
		}
		if !json.Valid([]byte(body)) {
			t.Fatalf("accepted a body that is not valid JSON: %q", body)
		}
		m, msg := req.validate()
		if msg != "" {
			return
		}
		// A blank text is valid only beside attachments.
		if _, bad := checkChannel(string(m.Channel)); bad != "" || (strings.TrimSpace(m.Text) == "" && len(m.Files) == 0) ||
			!utf8.ValidString(m.Text) || rtsandbox.UTF16Len(m.Text) > rtsandbox.MaxTextLen || m.Speaker != nil {
			t.Fatalf("validated message breaks the limits: %+v", m)
		}
	})
}

// FuzzDecodeAttachments feeds message bodies with attachments to the
// strict decoder. Nothing may panic; a refusal is a bounded text; what is
// accepted keeps every bound of docs/host.md, "State that survives restarts" (at most 20 entries, each 1 byte to
// 25 MiB decoded, 50 MiB in all), its bytes are reserved exactly, and it
// becomes the router message's Files with the declared sizes measured.
func FuzzDecodeAttachments(f *testing.F) {
	for _, tt := range attachmentValidationTests {
		if len(tt.body) <= 4096 {
			f.Add(tt.body)
		}
	}
	f.Add(withAttachments("look", list(entry("shot.png", "image/png", "iVBORw0KGgo="), entry("../x", "text/plain; charset=utf-8", "aGk="))))
	f.Add(withAttachments("", `[{"name":"a","mime_type":"a/b","data":"\/w=="}]`))
	f.Add(withAttachments("x", `[{"name":"\u0000","mime_type":"a/b","data":"AAAA"},{"name":"b","mime_type":"a/b","data":"AA=="}]`))
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/messages", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		meter := &uploadMeter{slots: make(chan struct{}, 1)}
		defer meter.release()
		d, status, text := newBoundedDecoder(httptest.NewRecorder(), r, DefaultMaxRequestBytes, meter)
		if d == nil {
			t.Fatalf("newBoundedDecoder refused a small JSON body: %d %s", status, text)
		}
		b := &budget{max: DefaultMaxHeldAttachmentBytes}
		res := &reservation{b: b}
		req, ok := decodeFuzzed(t, d, res)
		if !ok {
			res.release()
			if b.inUse() != 0 {
				t.Fatalf("a refused body left %d bytes reserved", b.inUse())
			}
			return
		}
		if len(req.Attachments) > rtsandbox.MaxAttachments {
			t.Fatalf("accepted %d attachments", len(req.Attachments))
		}
		total := 0
		for _, a := range req.Attachments {
			if len(a.Data) < 1 || len(a.Data) > rtsandbox.MaxAttachmentBytes || a.Size != int64(len(a.Data)) ||
				a.URL != "" || a.FromReference || a.Name == "" || a.ContentType == "" {
				t.Fatalf("accepted attachment breaks the rules: %q %q %d/%d bytes", a.Name, a.ContentType, a.Size, len(a.Data))
			}
			total += len(a.Data)
		}
		if total > rtsandbox.MaxAttachmentsTotal || res.n != int64(total) {
			t.Fatalf("accepted %d bytes in all, reserved %d", total, res.n)
		}
		res.release()
		m, msg := req.validate()
		if msg != "" {
			return
		}
		if m.Attachments != len(req.Attachments) || len(m.Files) != len(req.Attachments) {
			t.Fatalf("message counts %d attachments and %d files; decoded %d", m.Attachments, len(m.Files), len(req.Attachments))
		}
	})
}

// decodeFuzzed decodes a fuzzed body to its end; a refusal must be a
// short valid text, and reports ok false.
func decodeFuzzed(t *testing.T, d *decoder, res *reservation) (messageRequest, bool) {
	t.Helper()
	req, msg := decodeMessage(d, res)
	if msg == "" {
		msg = d.end()
	}
	if msg != "" {
		if len(msg) > 512 || !utf8.ValidString(msg) {
			t.Fatalf("refusal text of %d bytes (valid UTF-8: %v): %q", len(msg), utf8.ValidString(msg), msg)
		}
		return req, false
	}
	return req, true
}
