package answercorpus_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// Every corpus is one valid JSON text of exactly the size asked, the same
// on every call, and holds the features it is named for.
func TestAnswer(t *testing.T) {
	has := map[answercorpus.Kind][]string{
		answercorpus.Prose:     {`"content":"`},
		answercorpus.Markdown:  {`\n\n`, `\"`, `\\`, `\t`, `\u`, `\ud83d`, "世界", "😀", "```json", `\\\"`},
		answercorpus.ASCII:     {`\n\n`, `\"`, `\\`, `\u4e16`, `\ud83d\ude00`, `\\\"`},
		answercorpus.ToolCalls: {`"tool_calls":[`, `\\n`, `\\\"`, `\\\\`, "世界"},
	}
	lacks := map[answercorpus.Kind][]string{
		answercorpus.Prose: {`\`},
		answercorpus.ASCII: {"世界", "😀"},
	}
	for _, kind := range answercorpus.Kinds() {
		for _, size := range []int{16 << 10, 1 << 20} {
			t.Run(string(kind), func(t *testing.T) {
				a := answercorpus.Answer(kind, size)
				if len(a) != size {
					t.Errorf("len = %d; want %d", len(a), size)
				}
				if !bytes.Equal(a, answercorpus.Answer(kind, size)) {
					t.Error("two calls differ")
				}
				var v struct {
					Choices []struct {
						Message struct {
							Content   *string
							ToolCalls []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
						}
					}
				}
				if err := json.Unmarshal(a, &v); err != nil {
					t.Fatalf("not JSON: %v", err)
				}
				for _, tc := range v.Choices[0].Message.ToolCalls {
					if !json.Valid([]byte(tc.Function.Arguments)) {
						t.Errorf("arguments %.80q are not JSON", tc.Function.Arguments)
					}
				}
				for _, s := range has[kind] {
					if !strings.Contains(string(a), s) {
						t.Errorf("holds no %q", s)
					}
				}
				for _, s := range lacks[kind] {
					if strings.Contains(string(a), s) {
						t.Errorf("holds %q", s)
					}
				}
			})
		}
	}
}

// Every piece of a streamed corpus is JSON string content on its own (an
// escape never split between two deltas), the pieces are at least the size
// asked, the same on every call, and hold the kind's features; tool-call
// pieces decode to JSON arguments.
func TestStream(t *testing.T) {
	has := map[answercorpus.Kind][]string{
		answercorpus.Markdown:  {`\n\n`, `\"`, `\\`, `\u`, "世界"},
		answercorpus.ASCII:     {`\n\n`, `\u4e16`, `\ud83d`},
		answercorpus.ToolCalls: {`\\n`, `\\\"`, `{\"path\":`},
	}
	for _, kind := range answercorpus.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			pieces := answercorpus.Stream(kind, 64<<10)
			all := strings.Join(pieces, "")
			if len(all) < 64<<10 {
				t.Errorf("%d bytes; want at least %d", len(all), 64<<10)
			}
			if all != strings.Join(answercorpus.Stream(kind, 64<<10), "") {
				t.Error("two calls differ")
			}
			for _, p := range pieces {
				var s string
				if err := json.Unmarshal([]byte(`"`+p+`"`), &s); err != nil {
					t.Fatalf("piece %.80q is no JSON string content: %v", p, err)
				}
				if kind == answercorpus.ToolCalls && !json.Valid([]byte(s)) {
					t.Fatalf("tool arguments %.80q are not JSON", s)
				}
			}
			for _, s := range has[kind] {
				if !strings.Contains(all, s) {
					t.Errorf("holds no %q", s)
				}
			}
		})
	}
}
