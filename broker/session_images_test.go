package broker_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// chatAnswer is a chat-completions answer of the stand-in.
const chatAnswer = `{"choices":[{"message":{"role":"assistant","content":"seen"}}]}`

// openaiSession is the session fixture on an OpenAI chat-completions
// profile.
func openaiSession(t testing.TB) *sessFixture {
	return newSession(t, sessOptions{reply: chatReply, broker: chatProfile, session: chatWorker})
}

// chatReply, chatProfile and chatWorker make a session fixture's profile
// OpenAI chat completions, not streamed.
func chatReply(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, chatAnswer)
}

func chatProfile(c *broker.Config) {
	c.API, c.Stream, c.ModelURL = "", false, ep(c.ModelURL.String()+"/v1/chat/completions")
}

func chatWorker(c *broker.SessionConfig) { c.Worker.ModelAPI, c.Worker.Stream = "", false }

// The session broker's /model admits a user message's data-URL image
// parts (the turn's images, docs/protocol.md, "Images and files") and forwards them rebuilt; a remote
// image URL, which the provider would fetch for the guest, is refused
// before upstream, as in sealed mode.
func TestSessionModelImageParts(t *testing.T) {
	f := openaiSession(t)
	f.bind("low")
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,AQID"}}`
	r := f.post(wire.RouteModel, `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},`+image+`]}]}`)
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
		if r := f.post(wire.RouteModel, body); r.Status != http.StatusBadRequest {
			t.Errorf("%s: answer %d %q; want 400", name, r.Status, r.Body)
		}
	}
	if n := len(f.upstreamCalls("/v1/chat/completions")); n != 1 {
		t.Errorf("%d upstream calls; the refused ones must not reach it", n)
	}
}

// A daily token budget reserves an image at modelapi.ImageTokens, not at
// four bytes of its base64 a token: a 2 MB image (half a million tokens by
// its bytes) passes a budget of 100,000 tokens, in both dialects. A chat
// answer without usage is settled with the estimate that counted the image
// so; the Messages stand-in reports its usage, which is settled instead.
func TestSessionImageReservesImageTokensNotBytes(t *testing.T) {
	data := strings.Repeat("AAAA", 500_000) // 2,000,000 base64 characters
	for _, tc := range []struct {
		name, route, body string
		reply             http.HandlerFunc
		estimated         bool // settled with the estimate
		profile           func(*broker.Config)
		session           func(*broker.SessionConfig)
	}{
		{
			name: "chat", route: wire.RouteModel, estimated: true,
			body:  `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + data + `"}}]}]}`,
			reply: chatReply, profile: chatProfile, session: chatWorker,
		},
		{
			name: "messages", route: wire.RouteAnthropicMessages,
			body: `{"max_tokens":1000,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}}]}]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l *budget.Ledger
			f := newSession(t, sessOptions{reply: tc.reply, session: tc.session, broker: func(c *broker.Config) {
				l = openLedger(t, budget.Config{PerSpeaker: budget.Limits{Tokens: 100_000}})
				c.Budget = l
				if tc.profile != nil {
					tc.profile(c)
				}
			}})
			f.bind("low")
			if r := f.post(tc.route, tc.body); r.Status != http.StatusOK {
				t.Fatalf("answer %d %.200q; want 200 within the token budget", r.Status, r.Body)
			}
			used := usage(t, l, budget.Installation)[budget.Tokens].Used
			switch {
			case tc.estimated && (used < modelapi.ImageTokens || used > 100_000):
				t.Errorf("tokens used = %d; want the estimate, with the image at %d", used, modelapi.ImageTokens)
			case !tc.estimated && (used < 1 || used > 100_000):
				t.Errorf("tokens used = %d; want the stand-in's usage", used)
			}
		})
	}
}
