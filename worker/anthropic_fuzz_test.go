package worker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// FuzzReadStream feeds arbitrary bytes to the stream assembler: it never
// panics, fails only with a model_stream class, and what it accepts turns
// into a chat message the loop can read and a thinking replay that
// encodes.
func FuzzReadStream(f *testing.F) {
	f.Add(sse(evStart, evTextStart, evTextDelta, evBlockStop, evStop))
	f.Add(sse(evStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"1}"}}`,
		evBlockStop, evStop))
	f.Add(sse(evStart, `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}`, evStop))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\"}\n\n"))
	f.Add([]byte("data: {\"type\":\"message_start\"}\r\n\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks, err := readStream(bytes.NewReader(data))
		if err != nil {
			if class, _ := classify(err); class != classModelStream {
				t.Fatalf("readStream error %v has class %q; want model_stream", err, class)
			}
			return
		}
		if len(blocks) > maxAnswerBlocks {
			t.Fatalf("%d blocks; want at most %d", len(blocks), maxAnswerBlocks)
		}
		msg, thinking, err := chatMessage(blocks)
		if err != nil {
			return // an answer the loop refuses as a model_response
		}
		enc, err := json.Marshal(msg)
		var fields map[string]json.RawMessage // the message as the loop's JSON shape, to check its members
		if err != nil || json.Unmarshal(enc, &fields) != nil {
			t.Fatalf("chat message %+v does not encode: %v", msg, err)
		}
		if _, ok := fields["content"]; !ok {
			t.Fatalf("chat message %s lacks content", enc)
		}
		if calls, ok := fields["tool_calls"]; ok && !json.Valid(calls) {
			t.Fatalf("tool_calls %s are not JSON", calls)
		}
		if _, err := jsonjs.Marshal(thinking); err != nil {
			t.Fatalf("thinking replay does not encode: %v", err)
		}
	})
}
