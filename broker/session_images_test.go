package broker_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
)

// chatAnswer is a chat-completions answer of the stand-in.
const chatAnswer = `{"choices":[{"message":{"role":"assistant","content":"seen"}}]}`

// openaiSession is the session fixture on an OpenAI chat-completions
// profile.
func openaiSession(t *testing.T) *sessFixture {
	return newSession(t, sessOptions{
		reply: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, chatAnswer)
		},
		broker: func(c *broker.Config) {
			c.API, c.Stream, c.ModelURL = "", false, ep(c.ModelURL.String()+"/v1/chat/completions")
		},
		session: func(c *broker.SessionConfig) { c.Worker.ModelAPI, c.Worker.Stream = "", false },
	})
}

// The session broker's /model admits a user message's data-URL image
// parts (the turn's images, §4.2) and forwards them rebuilt; a remote
// image URL, which the provider would fetch for the guest, is refused
// before upstream, as in sealed mode.
func TestSessionModelImageParts(t *testing.T) {
	f := openaiSession(t)
	f.bind("low")
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,AQID"}}`
	r := f.post(rtsandbox.RouteModel, `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},`+image+`]}]}`)
	wantResp(t, r, http.StatusOK, chatAnswer)
	calls := f.upstreamCalls("/v1/chat/completions")
	if len(calls) != 1 || !strings.Contains(string(calls[0].Body), `"content":[{"type":"text","text":"look"},`+image+`]`) {
		t.Fatalf("upstream calls %+v; want one with the image part", calls)
	}
	for name, part := range map[string]string{
		"[SEC] remote image URL":         `{"type":"image_url","image_url":{"url":"https://guest.example/a.png"}}`,
		"[SEC] file part":                `{"type":"file","file":{"file_id":"file-1"}}`,
		"[SEC] svg data URL":             `{"type":"image_url","image_url":{"url":"data:image/svg+xml;base64,PHN2Zy8+"}}`,
		"[SEC] image in assistant reply": "",
	} {
		body := `{"messages":[{"role":"user","content":[` + part + `]}]}`
		if part == "" {
			body = `{"messages":[{"role":"assistant","content":[` + image + `]}]}`
		}
		if r := f.post(rtsandbox.RouteModel, body); r.Status != http.StatusBadRequest {
			t.Errorf("%s: answer %d %q; want 400", name, r.Status, r.Body)
		}
	}
	if n := len(f.upstreamCalls("/v1/chat/completions")); n != 1 {
		t.Errorf("%d upstream calls; the refused ones must not reach it", n)
	}
}
