package modelapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/adversarial"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// floods are the adversarial shapes of issue 21 (package adversarial),
// put at every position of both rules.
var floods = adversarial.Shapes()

// flood is shape's array of about size bytes.
func flood(name string, size int) string { return adversarial.Flood(name, size) }

// floodCount is the elements of a flood of elem of about size bytes.
func floodCount(elem string, size int) int { return adversarial.Count(elem, size) }

// decode decodes a test body as a JSON decoder would, failing the test
// without quoting it (the bodies are megabytes).
func decode(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("test body of %d bytes does not decode: %v", len(body), err)
	}
	return m
}

// A position puts a flood (a JSON array) in a body; refusal is what the
// rule answers when the flood's elements outnumber its count, "" when the
// position has no count rule (the body is then accepted, or refused for
// the budget when the flood is kept).
type position struct {
	name    string
	body    func(flood string) string
	refusal string
}

var messagesPositions = []position{
	{"Messages", func(f string) string { return `{"messages":` + f + `}` }, RefuseMessages},
	{"Content", func(f string) string { return withMessages(`{"role":"user","content":` + f + `}`) }, RefuseContent},
	{"SystemContent", func(f string) string { return withMessages(`{"role":"system","content":` + f + `}`) }, RefuseContent},
	{"ToolResultContent", func(f string) string {
		return withMessages(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":` + f + `}]}`)
	}, RefuseContent},
	{"System", func(f string) string { return body(`"system":` + f) }, RefuseContent},
	{"Tools", func(f string) string { return body(`"tools":` + f) }, RefuseTools},
	{"ToolUseInput", func(f string) string {
		return withMessages(`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{"x":` + f + `}}]}`)
	}, ""},
	{"BlockMember", func(f string) string {
		return withMessages(`{"role":"user","content":[{"type":"text","text":"hi","x":` + f + `}]}`)
	}, ""},
	{"CacheControl", func(f string) string {
		return withMessages(`{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"x":` + f + `}}]}`)
	}, ""},
	{"TopMember", func(f string) string { return body(`"metadata":` + f) }, ""},
	{"StopSequences", func(f string) string { return body(`"stop_sequences":` + f) }, ""},
	{"Role", func(f string) string { return withMessages(`{"role":` + f + `,"content":"hi"}`) }, ""},
	{"InputSchemaEnum", func(f string) string {
		return body(`"tools":[{"name":"n","input_schema":{"type":"object","enum":` + f + `}}]`)
	}, ""},
}

var chatPositions = []position{
	{"Messages", func(f string) string { return `{"messages":` + f + `}` }, "messages"},
	{"ContentParts", func(f string) string { return userParts(f[1 : len(f)-1]) }, "content parts"},
	{"ToolCalls", func(f string) string {
		return `{"messages":[{"role":"assistant","content":"","tool_calls":` + f + `}]}`
	}, "tool calls"},
	{"Tools", func(f string) string { return `{"messages":[],"tools":` + f + `}` }, "tools"},
	{"TopMember", func(f string) string { return `{"messages":[],"metadata":` + f + `}` }, ""},
	{"ParametersEnum", func(f string) string { return toolBody(`{"type":"object","enum":` + f + `}`) }, ""},
	{"ToolMember", func(f string) string {
		return `{"messages":[],"tools":[{"type":"function","x":` + f + `,"function":{"name":"f","description":"","parameters":{}}}]}`
	}, ""},
}

// decodeSize is the size of the shapes in the tests.
var decodeSize = map[bool]int{false: 1 << 20, true: 128 << 10}[raceEnabled]

// shapeBudget is the budget of a body of size bytes without the floor
// (NodesFor less NodeFloor), so that the bound shows per byte.
func shapeBudget(size int) *jsontree.Budget {
	return jsontree.NewBudget(context.Background(), size/jsontree.NodeBytes)
}

// decodeLimit is what normalising a body of size bytes under shapeBudget
// may allocate: its values at their dearest (a small object's map, under
// 400 bytes) plus four bytes per body byte (a string's copy, the rebuilt
// request, slices' growth): 7.2 bytes per byte; and, once, the schema
// check's stack of open containers at the 10000 of the nesting bound.
func decodeLimit(size int) uint64 {
	return uint64(size/jsontree.NodeBytes*400 + 4*size + 4<<20)
}

// allocated is the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestNormalizeMessagesAdversarialShapes puts every shape at every
// position of the Messages rule: a position with a count rule refuses with
// its text (at the count: the rest of the flood is never read), and
// whatever the answer, normalising allocates at most decodeLimit.
func TestNormalizeMessagesAdversarialShapes(t *testing.T) {
	p := MessagesParams{Model: "m", Level: LevelHigh}
	for _, pos := range messagesPositions {
		for _, f := range floods {
			t.Run(pos.name+"/"+f.Name, func(t *testing.T) {
				raw := decode(t, pos.body(flood(f.Name, decodeSize)))
				var err error
				q := p
				q.Budget = shapeBudget(bodySize(raw))
				alloc := allocated(func() { _, err = NormalizeMessages(raw, q) })
				checkShapeOutcome(t, pos, outnumbers(f.Elem, countOf(pos.refusal)), refusalText(err), err)
				if size := bodySize(raw); alloc > decodeLimit(size) {
					t.Errorf("NormalizeMessages allocated %d bytes for a body of %d (%.1f×); want at most %d", alloc, size, float64(alloc)/float64(size), decodeLimit(size))
				}
			})
		}
	}
}

// TestNormalizeChatAdversarialShapes is the same for the /model rule, in
// the session broker's reading (image parts admitted).
func TestNormalizeChatAdversarialShapes(t *testing.T) {
	for _, pos := range chatPositions {
		for _, f := range floods {
			t.Run(pos.name+"/"+f.Name, func(t *testing.T) {
				raw := decode(t, pos.body(flood(f.Name, decodeSize)))
				var err error
				opts := ChatOptions{ImageParts: true, Budget: shapeBudget(bodySize(raw))}
				alloc := allocated(func() { _, err = NormalizeChatWith(raw, opts) })
				text := ""
				if err != nil {
					text = err.Error()
				}
				want := pos
				if want.refusal != "" {
					want.refusal = "more than " + fmt.Sprint(chatCount(pos.refusal)) + " " + pos.refusal
				}
				checkShapeOutcome(t, want, outnumbers(f.Elem, chatCount(pos.refusal)), text, err)
				if size := bodySize(raw); alloc > decodeLimit(size) {
					t.Errorf("NormalizeChatWith allocated %d bytes for a body of %d (%.1f×); want at most %d", alloc, size, float64(alloc)/float64(size), decodeLimit(size))
				}
			})
		}
	}
}

// chatCount is the count of the /model rule that names what.
func chatCount(what string) int {
	return map[string]int{"messages": MaxMessages, "content parts": MaxContentParts, "tool calls": MaxToolCalls, "tools": MaxTools}[what]
}

// countOf is the count of the Messages rule that refuses with text.
func countOf(text string) int {
	switch text {
	case RefuseMessages:
		return MaxAnthropicMessages
	case RefuseTools:
		return MaxAnthropicTools
	}
	return MaxAnthropicBlocks
}

// outnumbers reports whether a flood of elem at decodeSize has more
// elements than count.
func outnumbers(elem string, count int) bool {
	return elem != "" && floodCount(elem, decodeSize) > count
}

// checkShapeOutcome asserts the answer to a flood at pos: the count
// rule's refusal when the flood outnumbers it (over), and only ever an
// answer of the rule, never another error.
func checkShapeOutcome(t *testing.T, pos position, over bool, text string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, rtsandbox.ErrRefused) {
		t.Fatalf("error = %v; want a refusal", err)
	}
	if pos.refusal != "" && over && !strings.Contains(text, pos.refusal) {
		t.Errorf("answer %q; want the count rule's %q", text, pos.refusal)
	}
}

// refusalText is the guest's text of a Messages refusal, "" for none.
func refusalText(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Message
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func bodySize(body map[string]json.RawMessage) int {
	n := 0
	for k, v := range body {
		n += len(k) + len(v)
	}
	return n
}

// TestNormalizeRefusesOverTheBudget keeps a tool_use input of more values
// than the body pays for: refused with RefuseBudget, which wraps
// ErrRefused, and on the /model rule with a refusal naming the budget.
func TestNormalizeRefusesOverTheBudget(t *testing.T) {
	raw := decode(t, messagesPositions[6].body(flood("TinyStrings", 1<<20)))
	_, err := NormalizeMessages(raw, MessagesParams{Model: "m", Level: LevelLow})
	var r *Refusal
	if !errors.As(err, &r) || r.Message != RefuseBudget || !errors.Is(err, rtsandbox.ErrRefused) {
		t.Errorf("NormalizeMessages of a kept flood = %v; want the refusal %q", err, RefuseBudget)
	}
	under := decodeBody(t, messagesPositions[6].body(`["a","b"]`))
	if _, err := NormalizeMessages(under, MessagesParams{Model: "m", Level: LevelLow}); err != nil {
		t.Errorf("NormalizeMessages of a small input = %v; want it accepted", err)
	}
	b := jsontree.NewBudget(context.Background(), 10)
	chat := decodeBody(t, `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":{"properties":{`+
		strings.TrimSuffix(strings.Repeat(`"a":{},`, 0), ",")+`"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{},"h":{},"i":{},"j":{},"k":{}}}}}]}`)
	if _, err := NormalizeChatWith(chat, ChatOptions{Budget: b}); !errors.Is(err, jsontree.ErrBudget) || !errors.Is(err, rtsandbox.ErrRefused) {
		t.Errorf("NormalizeChatWith of a schema of 12 keys under 10 = %v; want a refusal for the budget", err)
	}
}

// TestNormalizeStopsWithTheCall ends the budget's context before and
// while each rule reads a large body: the error wraps jsontree.ErrStopped
// and no refusal (the call is over; the guest gets no rule's text).
func TestNormalizeStopsWithTheCall(t *testing.T) {
	bodies := map[string]string{
		"SkippedMember":  messagesPositions[7].body(flood("EmptyArrays", decodeSize)),
		"ToolUseInput":   messagesPositions[6].body(flood("Zeros", decodeSize)),
		"HugeText":       withMessages(`{"role":"user","content":` + flood("HugeString", decodeSize)[1:decodeSize+3] + `}`),
		"InputSchemaBig": messagesPositions[12].body(flood("Zeros", decodeSize)),
	}
	for name, text := range bodies {
		for _, looks := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s/after%d", name, looks), func(t *testing.T) {
				raw := decode(t, text)
				ctx := &endsAfter{Context: context.Background(), Looks: looks}
				b := jsontree.NewBudget(ctx, jsontree.NodesFor(bodySize(raw)))
				_, err := NormalizeMessages(raw, MessagesParams{Model: "m", Level: LevelLow, Budget: b})
				if !errors.Is(err, jsontree.ErrStopped) || errors.Is(err, rtsandbox.ErrRefused) {
					t.Errorf("NormalizeMessages with the call ended = %v; want ErrStopped and no refusal", err)
				}
			})
		}
	}
	chat := decode(t, chatPositions[4].body(flood("Zeros", decodeSize)))
	b := jsontree.NewBudget(&endsAfter{Context: context.Background()}, jsontree.NodesFor(decodeSize))
	if _, err := NormalizeChatWith(chat, ChatOptions{Budget: b}); !errors.Is(err, jsontree.ErrStopped) || errors.Is(err, rtsandbox.ErrRefused) {
		t.Errorf("NormalizeChatWith with the call ended = %v; want ErrStopped and no refusal", err)
	}
}

// endsAfter is a context that ends at its looks-th call of Err
// (adversarial.EndsAfter).
type endsAfter = adversarial.EndsAfter

// FuzzNormalizeUnderBudget holds both rules under a small node budget to
// the same rules without one: the budget only ever refuses (RefuseBudget,
// or the /model rule's refusal for it), never changes what is rebuilt.
func FuzzNormalizeUnderBudget(f *testing.F) {
	for i, tt := range slices.Concat(acceptedMessagesCases, refusedMessagesCases) {
		if len(tt.body) <= maxSeed {
			f.Add(tt.body, uint8(i), true)
		}
	}
	for i, tt := range slices.Concat(refusedChatCases, acceptedChatCases) {
		if len(tt.body) <= maxSeed {
			f.Add(tt.body, uint8(i), false)
		}
	}
	f.Fuzz(func(t *testing.T, body string, nodes uint8, messages bool) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &m) != nil {
			return
		}
		b := jsontree.NewBudget(context.Background(), int(nodes))
		if messages {
			p := MessagesParams{Model: "m", Level: LevelHigh}
			want, wantErr := NormalizeMessages(m, p)
			p.Budget = b
			got, err := NormalizeMessages(m, p)
			if errors.Is(b.Err(), jsontree.ErrBudget) {
				if refusalText(err) != RefuseBudget {
					t.Fatalf("NormalizeMessages(%s) over the budget = %v; want %q", body, err, RefuseBudget)
				}
				return
			}
			checkSameOutcome(t, body, got, err, want, wantErr)
			return
		}
		want, wantErr := NormalizeChatWith(m, ChatOptions{ImageParts: true})
		got, err := NormalizeChatWith(m, ChatOptions{ImageParts: true, Budget: b})
		if errors.Is(b.Err(), jsontree.ErrBudget) {
			if !errors.Is(err, jsontree.ErrBudget) || !errors.Is(err, rtsandbox.ErrRefused) {
				t.Fatalf("NormalizeChatWith(%s) over the budget = %v; want a refusal for the budget", body, err)
			}
			return
		}
		checkSameOutcome(t, body, got, err, want, wantErr)
	})
}

// checkSameOutcome requires the same decision and the same rebuilt
// request of two normalisations.
func checkSameOutcome(t *testing.T, body string, got any, err error, want any, wantErr error) {
	t.Helper()
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("normalising %s under a budget = %v; without one %v", body, err, wantErr)
	}
	if err != nil {
		return
	}
	a, _ := jsonjs.Marshal(got)
	b, _ := jsonjs.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Fatalf("normalising %s under a budget = %s; without one %s", body, a, b)
	}
}
