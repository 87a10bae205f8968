package fakemodel

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Image parts are recorded in both dialects, on the message that carried
// them: chat image_url parts (a data URL read into type and data, any
// other URL kept as it is), Messages image blocks of a user message and
// of a tool_result.
func TestImagesRecorded(t *testing.T) {
	s := start(t, Options{Loop: true}, Reply("seen"))
	chat := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AQID"}},{"type":"text","text":"look"}]},` +
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.example/a.png"}}]}]}`
	messages := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}},{"type":"text","text":"look"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"read_attachment","input":{"name":"a.png"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"shown"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AQID"}}]}]}]}`
	for path, body := range map[string]string{"/v1/chat/completions": chat, "/v1/messages": messages} {
		resp, err := http.Post(s.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		var want []Image
		switch r.API {
		case OpenAI:
			want = []Image{{MIMEType: "image/png", Data: "AQID"}, {URL: "https://x.example/a.png"}}
			if got := r.Body.Messages[0].Text(); got != "look" {
				t.Errorf("chat text of parts = %q; want look", got)
			}
		default:
			want = []Image{{MIMEType: "image/gif", Data: "R0lG"}, {MIMEType: "image/png", Data: "AQID"}}
			if tm := r.Body.Messages[2]; tm.Role != "tool" || len(tm.Images) != 1 || tm.Text() != "shown" {
				t.Errorf("tool message %+v; want the tool_result's text and its image", tm)
			}
		}
		if diff := cmp.Diff(want, r.Images()); diff != "" {
			t.Errorf("%v images (-want +got):\n%s", r.API, diff)
		}
	}
}
