package modelapi

import (
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// BenchmarkNormalizeConversation measures the broker's work on a session
// request before the first upstream byte: split the body into members,
// rebuild it with NormalizeMessages and encode the rebuilt request. The
// body is a conversation of markdown text blocks, user and assistant in
// turn, the shape of a long session's Messages request.
func BenchmarkNormalizeConversation(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"16KiB", 16 << 10}, {"200KiB", 200 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			body := conversationBody(size.bytes)
			p := MessagesParams{Model: "m", Level: LevelLow}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				raw, err := jsontree.Split(body) // as the broker's decodeObject
				if err != nil {
					b.Fatal(err)
				}
				r, err := NormalizeMessages(raw, p)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := jsonjs.Marshal(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// conversationBody builds a Messages request body of about size bytes:
// markdown from answercorpus in text blocks of about 4000 bytes, starting
// and ending with a user message.
func conversationBody(size int) []byte {
	var msgs []string
	var text strings.Builder
	role := "user"
	for _, piece := range answercorpus.Stream(answercorpus.Markdown, size) {
		text.WriteString(piece) // pieces are JSON string content, escapes included
		if text.Len() <= 4000 {
			continue
		}
		msgs = append(msgs, `{"role":"`+role+`","content":[{"type":"text","text":"`+text.String()+`"}]}`)
		text.Reset()
		if role == "user" {
			role = "assistant"
		} else {
			role = "user"
		}
	}
	if role == "user" { // the last message was the assistant's
		msgs = msgs[:len(msgs)-1]
	}
	return []byte(`{"max_tokens":1000,"stream":true,"messages":[` + strings.Join(msgs, ",") + `]}`)
}
