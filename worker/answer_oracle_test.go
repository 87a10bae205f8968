package worker

// The field-by-field reads of a chat-completions answer that the typed
// answer wire replaced (modelMessage into a map, then content and
// tool_calls read from it), kept as the oracle of
// FuzzAnswerAgreesWithFieldByField and as the "map" side of
// BenchmarkModelAnswer.

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// answerRead is what the loop takes from an answer: the content when it
// is a string, and the tool calls as sent when they are an array.
type answerRead struct {
	Content    string
	HasContent bool
	Calls      []json.RawMessage
}

func readAnswer(raw json.RawMessage) (answerRead, error) {
	msg, err := modelMessage(raw)
	if err != nil {
		return answerRead{}, err
	}
	return answerRead{Content: msg.Content.Value, HasContent: msg.Content.Set, Calls: msg.ToolCalls}, nil
}

func oldReadAnswer(raw json.RawMessage) (answerRead, error) {
	msg, err := oldModelMessage(raw)
	if err != nil {
		return answerRead{}, err
	}
	content, ok := str(msg["content"])
	calls, _ := array(msg["tool_calls"])
	return answerRead{Content: content, HasContent: ok, Calls: calls}, nil
}

func oldModelMessage(raw json.RawMessage) (map[string]json.RawMessage, error) {
	errInvalid := errModelResponse
	obj, ok := object(raw)
	if !ok {
		return nil, errInvalid
	}
	choices, ok := array(obj["choices"])
	if !ok || len(choices) == 0 {
		return nil, errInvalid
	}
	choice, ok := object(choices[0])
	if !ok {
		return nil, errInvalid
	}
	msg, ok := object(choice["message"])
	if !ok {
		return nil, errInvalid
	}
	return msg, nil
}

// FuzzAnswerAgreesWithFieldByField holds the typed answer decoding to
// the field-by-field reads it replaced: the same verdict, content and
// tool calls on whatever the model (through the broker) answers.
func FuzzAnswerAgreesWithFieldByField(f *testing.F) {
	for _, tc := range answerMembersCases {
		f.Add([]byte(tc.answer))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := readAnswer(raw)
		want, oldErr := oldReadAnswer(raw)
		if err != oldErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: typed %+v, %v; field by field %+v, %v", raw, got, err, want, oldErr)
		}
	})
}

// TestAnswerMembersExact pins the member rules of a model answer that a
// plain encoding/json decode would change: exact names, the last of
// repeated members; choices a non-empty array whose first item is an
// object with a message object; content read when a string, tool_calls
// when an array, anything else (null included) being none.
func TestAnswerMembersExact(t *testing.T) {
	for _, tc := range answerMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAnswer(json.RawMessage(tc.answer))
			if (err == nil) != tc.ok || got.Content != tc.content || got.HasContent != tc.hasContent || len(got.Calls) != tc.calls {
				t.Fatalf("readAnswer(%s) = %+v, %v; want ok %v content %q (%v), %d calls", tc.answer, got, err, tc.ok, tc.content, tc.hasContent, tc.calls)
			}
		})
	}
}

func answerOf(msg string) string { return `{"choices":[{"message":` + msg + `}]}` }

var answerMembersCases = []struct {
	name, answer string
	ok           bool
	content      string
	hasContent   bool
	calls        int
}{
	{"final", answerOf(`{"role":"assistant","content":"hi"}`), true, "hi", true, 0},
	{"content-null", answerOf(`{"content":null,"tool_calls":[{"id":"a"}]}`), true, "", false, 1},
	{"content-number", answerOf(`{"content":7}`), true, "", false, 0},
	{"content-folded", answerOf(`{"Content":"x"}`), true, "", false, 0},
	{"content-repeated-last-wins", answerOf(`{"content":"a","content":"b"}`), true, "b", true, 0},
	{"content-repeated-last-null", answerOf(`{"content":"a","content":null}`), true, "", false, 0},
	{"calls-null", answerOf(`{"content":"a","tool_calls":null}`), true, "a", true, 0},
	{"calls-object", answerOf(`{"content":"a","tool_calls":{"0":{}}}`), true, "a", true, 0},
	{"calls-folded", answerOf(`{"content":"a","Tool_Calls":[1]}`), true, "a", true, 0},
	{"calls-items-any", answerOf(`{"tool_calls":[1,null,"x"]}`), true, "", false, 3},
	{"choices-empty", `{"choices":[]}`, false, "", false, 0},
	{"choices-null", `{"choices":null}`, false, "", false, 0},
	{"choices-folded", `{"Choices":[{"message":{}}]}`, false, "", false, 0},
	{"choices-repeated-last-wins", `{"choices":[],"choices":[{"message":{"content":"z"}}]}`, true, "z", true, 0},
	{"choices-second-any", `{"choices":[{"message":{"content":"z"}},7]}`, true, "z", true, 0},
	{"choice-null", `{"choices":[null]}`, false, "", false, 0},
	{"message-null", `{"choices":[{"message":null}]}`, false, "", false, 0},
	{"message-folded", `{"choices":[{"Message":{}}]}`, false, "", false, 0},
	{"message-array", `{"choices":[{"message":[]}]}`, false, "", false, 0},
	{"spaced", " \n" + answerOf(`{ "content" : "a" }`) + "\r\n", true, "a", true, 0},
	{"leading-vt", "\v" + answerOf(`{"content":"a"}`), false, "", false, 0},
	{"trailing-ff", answerOf(`{"content":"a"}`) + "\f", false, "", false, 0},
	{"trailing-object", answerOf(`{"content":"a"}`) + "{}", false, "", false, 0},
	{"not-object", `[]`, false, "", false, 0},
}

// realisticAnswer is a production-like chat-completions answer: an
// id, usage and the other members a provider adds, some 6 KB of text
// and two tool calls.
var realisticAnswer = `{"id":"chatcmpl-9x8y7z","object":"chat.completion","created":1733300000,"model":"gpt-4o-2024-08-06",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":` + mustJSON(strings.Repeat("The schedule for Wednesday is unchanged; \u00e9t\u00e9 notes follow. ", 90)) +
	`,"tool_calls":[{"id":"call_abc123","type":"function","function":{"name":"memory_set","arguments":"{\"scope\":\"channel\",\"key\":\"wed\",\"text\":\"standup at 10\"}"}},` +
	`{"id":"call_def456","type":"function","function":{"name":"host_lookup","arguments":"{\"q\":\"noon\"}"}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],` +
	`"usage":{"prompt_tokens":5231,"completion_tokens":1480,"total_tokens":6711},"system_fingerprint":"fp_1234"}`

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// BenchmarkModelAnswer reads a production-like answer as the loop does:
// typed (modelMessage) and field by field (the map it replaced), side by
// side.
func BenchmarkModelAnswer(b *testing.B) {
	raw := json.RawMessage(realisticAnswer)
	for _, bc := range []struct {
		name string
		read func(json.RawMessage) (answerRead, error)
	}{{"typed", readAnswer}, {"map", oldReadAnswer}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := bc.read(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
