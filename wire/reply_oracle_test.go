package wire

// The field-by-field ParseReply the typed reply wire replaced, kept as
// the oracle of FuzzReplyAgreesWithFieldByField: the typed decoding
// accepts exactly what it accepted, with the same values.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
)

// FuzzReplyAgreesWithFieldByField holds ParseReply to the field-by-field
// parser it replaced: the same verdict on every input, and the same
// reply when accepted.
func FuzzReplyAgreesWithFieldByField(f *testing.F) {
	for _, tc := range replyMembersCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"ok":true,"text":"a","state":{"memory":[{"scope":"s","key":"k","text":"t"}],"history":[{"role":"user","content":"c"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, "reply", data, ParseReply, oldParseReply)
	})
}

// TestReplyMembersExact pins the member rules of ParseReply that a plain
// encoding/json struct decode would change: the reply's and the entries'
// members are matched by exact name, a repeated member counts as its last
// value, null is no value; the state's two lists, read by encoding/json
// from the start, match their names under case folding.
func TestReplyMembersExact(t *testing.T) {
	for _, tc := range replyMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseReply([]byte(tc.body)); (err == nil) != tc.ok {
				t.Fatalf("ParseReply(%s) = %v; want ok %v", tc.body, err, tc.ok)
			}
		})
	}
}

var replyMembersCases = []struct {
	name string
	body string
	ok   bool
}{
	{"ok-folded-only", `{"OK":true,"text":"a"}`, false},
	{"text-folded-only", `{"ok":true,"Text":"a"}`, false},
	{"folded-dropped", `{"OK":1,"ok":true,"TEXT":null,"text":"a"}`, true},
	{"text-repeated-last-wins", `{"ok":true,"text":1,"text":"a"}`, true},
	{"text-repeated-last-null", `{"ok":true,"text":"a","text":null}`, false},
	{"ok-spaced", `{"ok" : true , "text" : "a" }`, true},
	{"state-folded-lists", `{"ok":true,"text":"a","state":{"Memory":[],"HISTORY":[]}}`, true},
	{"state-folded-state", `{"ok":true,"text":"a","State":7}`, true},
	{"state-number", `{"ok":true,"text":"a","state":7}`, false},
	{"state-repeated-last-null", `{"ok":true,"text":"a","state":{"memory":[],"history":[]},"state":null}`, false},
	{"state-list-repeated-last-null", `{"ok":true,"text":"a","state":{"memory":[],"history":[],"memory":null}}`, false},
	{"entry-folded-key", `{"ok":true,"text":"a","state":{"memory":[{"scope":"s","Key":"k","text":"t"}],"history":[]}}`, false},
	{"entry-repeated-last-wins", `{"ok":true,"text":"a","state":{"memory":[{"scope":"s","key":1,"key":"k","text":"t"}],"history":[]}}`, true},
	{"entry-repeated-last-null", `{"ok":true,"text":"a","state":{"memory":[],"history":[{"role":"user","content":"c","role":null}]}}`, false},
	{"entry-array", `{"ok":true,"text":"a","state":{"memory":[[]],"history":[]}}`, false},
	{"entry-extra-dropped", `{"ok":true,"text":"a","state":{"memory":[],"history":[{"role":"user","content":"c","x":null}]}}`, true},
	{"text-escapes", `{"ok":false,"text":"\u00e9\ud83d\ude00\n"}`, true},
	{"text-bad-utf8", "{\"ok\":true,\"text\":\"\xff\"}", true},
	{"trailing-space", "{\"ok\":true,\"text\":\"a\"} \n\t", true},
	{"leading-vt", "\v{\"ok\":true,\"text\":\"a\"}", false},
	{"leading-nel", "\u0085{\"ok\":true,\"text\":\"a\"}", false},
	{"leading-nbsp", "\u00a0{\"ok\":true,\"text\":\"a\"}", false},
	{"trailing-ff", "{\"ok\":true,\"text\":\"a\"}\f", false},
	{"leading-bom", "\ufeff{\"ok\":true,\"text\":\"a\"}", false},
}

func oldParseReply(stdout []byte) (rtsandbox.Reply, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stdout, &fields); err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: %v", ErrInvalidReply, err)
	}
	if fields == nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: not an object", ErrInvalidReply)
	}
	var r rtsandbox.Reply
	okRaw := bytes.TrimSpace(fields["ok"])
	switch string(okRaw) {
	case "true":
		r.OK = true
	case "false":
	default:
		return rtsandbox.Reply{}, fmt.Errorf("%w: ok is not a boolean", ErrInvalidReply)
	}
	textRaw := bytes.TrimSpace(fields["text"])
	if len(textRaw) == 0 || textRaw[0] != '"' || json.Unmarshal(textRaw, &r.Text) != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text is not a string", ErrInvalidReply)
	}
	if n := rtsandbox.UTF16Len(r.Text); n > rtsandbox.MaxReplyText {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text has %d UTF-16 units", ErrInvalidReply, n)
	}
	if raw, ok := fields["state"]; ok {
		st, err := oldParseState(raw)
		if err != nil {
			return rtsandbox.Reply{}, fmt.Errorf("%w: state: %v", ErrInvalidReply, err)
		}
		r.State = st
	}
	return r, nil
}

func oldParseState(raw json.RawMessage) (*rtsandbox.ChannelState, error) {
	var fields struct {
		Memory  []map[string]json.RawMessage `json:"memory"`
		History []map[string]json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields.Memory == nil || fields.History == nil {
		return nil, errors.New("memory and history must be arrays")
	}
	st := &rtsandbox.ChannelState{
		Memory:  make([]rtsandbox.MemoryEntry, len(fields.Memory)),
		History: make([]rtsandbox.HistoryEntry, len(fields.History)),
	}
	for i, m := range fields.Memory {
		e := &st.Memory[i]
		if err := oldStringFields(m, map[string]*string{"scope": &e.Scope, "key": &e.Key, "text": &e.Text}); err != nil {
			return nil, fmt.Errorf("memory %d: %w", i, err)
		}
	}
	for i, h := range fields.History {
		e := &st.History[i]
		if err := oldStringFields(h, map[string]*string{"role": &e.Role, "content": &e.Content}); err != nil {
			return nil, fmt.Errorf("history %d: %w", i, err)
		}
	}
	return st, nil
}

func oldStringFields(obj map[string]json.RawMessage, dst map[string]*string) error {
	if obj == nil {
		return errors.New("not an object")
	}
	for name, p := range dst {
		raw := bytes.TrimSpace(obj[name])
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, p) != nil {
			return fmt.Errorf("%s is not a string", name)
		}
	}
	return nil
}

// BenchmarkParseReply reads a production-like sealed reply (a 4 KB
// answer, the state with 64 memory entries and 20 history messages of
// about 1 KB) typed (ParseReply) and field by field (the parser it
// replaced), side by side.
func BenchmarkParseReply(b *testing.B) {
	st := rtsandbox.ChannelState{}
	for i := range 64 {
		st.Memory = append(st.Memory, rtsandbox.MemoryEntry{Scope: "speaker:u" + strconv.Itoa(i%5), Key: "key " + strconv.Itoa(i), Text: strings.Repeat("remember this detail ", 6)})
	}
	for i := range 20 {
		role := []string{"user", "assistant"}[i%2]
		st.History = append(st.History, rtsandbox.HistoryEntry{Role: role, Content: strings.Repeat("a message \u00e9t\u00e9 with some text ", 40)})
	}
	raw, err := json.Marshal(rtsandbox.Reply{OK: true, Text: strings.Repeat("The answer, line by line.\n", 160), State: &st})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		parse func([]byte) (rtsandbox.Reply, error)
	}{{"typed", ParseReply}, {"map", oldParseReply}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := bc.parse(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
