package modelapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// Images counts the image parts of a chat request and the image blocks of
// a Messages request, in tool results too, with the bytes of their data
// as the rebuilt body holds it; text counts nothing.
func TestImagesCounted(t *testing.T) {
	png := strings.Repeat("AAAA", 1000) // 4,000 base64 characters
	chatBody := `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png + `"}},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png + `"}}]},` +
		`{"role":"assistant","content":"a cat"}]}`
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(chatBody), &obj); err != nil {
		t.Fatal(err)
	}
	in, err := NormalizeChatWith(obj, ChatOptions{ImageParts: true})
	if err != nil {
		t.Fatal(err)
	}
	url := len("data:image/png;base64,") + len(png)
	if n, size := in.Images(); n != 2 || size != 2*url {
		t.Errorf("chat Images() = %d, %d; want 2, %d", n, size, 2*url)
	}

	msgBody := `{"max_tokens":100,"messages":[` +
		`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` +
		`{"type":"text","text":"here"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}]}]}]}`
	if err := json.Unmarshal([]byte(msgBody), &obj); err != nil {
		t.Fatal(err)
	}
	msg, err := NormalizeMessages(obj, MessagesParams{Model: "m", MaxOutputTokens: 2000, Level: LevelHigh})
	if err != nil {
		t.Fatal(err)
	}
	if n, size := msg.Images(); n != 2 || size != 2*len(png) {
		t.Errorf("messages Images() = %d, %d; want 2, %d", n, size, 2*len(png))
	}
	if n, size := (&ChatInput{Messages: []Message{{Role: "user", Content: png}}}).Images(); n != 0 || size != 0 {
		t.Errorf("text-only Images() = %d, %d; want 0, 0", n, size)
	}
}
