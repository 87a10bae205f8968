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
// whatever a guest could post. Neither may panic; a refusal names the key
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
		req, msg := decodeMessage(d)
		if msg == "" {
			msg = d.end()
		}
		if msg != "" {
			if len(msg) > 512 || !utf8.ValidString(msg) {
				t.Fatalf("refusal text of %d bytes (valid UTF-8: %v): %q", len(msg), utf8.ValidString(msg), msg)
			}
			return
		}
		if !json.Valid([]byte(body)) {
			t.Fatalf("accepted a body that is not valid JSON: %q", body)
		}
		m, msg := req.validate()
		if msg != "" {
			return
		}
		if _, bad := checkChannel(string(m.Channel)); bad != "" || strings.TrimSpace(m.Text) == "" ||
			!utf8.ValidString(m.Text) || rtsandbox.UTF16Len(m.Text) > MaxTextUnits || m.Speaker != nil {
			t.Fatalf("validated message breaks the limits: %+v", m)
		}
	})
}
