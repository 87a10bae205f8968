package wire

// The field-by-field ParseMemoryCall the typed memory input replaced,
// kept as the oracle of FuzzMemoryCallAgreesWithFieldByField.

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
)

// FuzzMemoryCallAgreesWithFieldByField holds DecodeMemoryCall to the
// field-by-field parser it replaced: the same call or the same refusal
// for every tool name and input.
func FuzzMemoryCallAgreesWithFieldByField(f *testing.F) {
	for _, tc := range memoryMembersCases {
		f.Add(tc.tool, []byte(tc.input))
	}
	f.Add(MemorySet, []byte(`{"scope":"speaker","key":" k ","text":" t "}`))
	f.Add(MemoryGet, []byte(`{"scope":"channel","query":"WeD","key":7}`))
	f.Add("memory_list", []byte(`{"scope":"channel","key":"k"}`))
	f.Fuzz(func(t *testing.T, tool string, input []byte) {
		got, err := DecodeMemoryCall(tool, input)
		want, oldErr := oldDecodeMemoryCall(tool, input)
		if err != oldErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %q: typed %+v, %v; field by field %+v, %v", tool, input, got, err, want, oldErr)
		}
	})
}

// TestMemoryCallMembersExact pins the member rules of a memory call that
// a plain encoding/json decode would change: exact names, the last of
// repeated members, and every member lenient (null or another type reads
// as absent).
func TestMemoryCallMembersExact(t *testing.T) {
	for _, tc := range memoryMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeMemoryCall(tc.tool, json.RawMessage(tc.input)); err != tc.err {
				t.Fatalf("DecodeMemoryCall(%s, %s) = %v; want %v", tc.tool, tc.input, err, tc.err)
			}
		})
	}
}

var memoryMembersCases = []struct {
	name, tool, input string
	err               error
}{
	{"scope-folded", MemoryGet, `{"Scope":"channel"}`, ErrMemoryScope},
	{"scope-null", MemoryGet, `{"scope":null}`, ErrMemoryScope},
	{"scope-repeated-last-wins", MemoryGet, `{"scope":"x","scope":"channel"}`, nil},
	{"scope-repeated-last-null", MemoryGet, `{"scope":"channel","scope":null}`, ErrMemoryScope},
	{"key-null-absent", MemoryGet, `{"scope":"channel","key":null}`, nil},
	{"key-null-absent-set", MemorySet, `{"scope":"channel","key":null,"text":"t"}`, ErrMemoryNoKey},
	{"key-folded-absent", MemoryRemove, `{"scope":"channel","KEY":"k"}`, ErrMemoryNoKey},
	{"key-repeated-last-blank", MemoryRemove, `{"scope":"channel","key":"k","key":" "}`, ErrMemoryKey},
	{"text-null", MemorySet, `{"scope":"channel","key":"k","text":null}`, ErrMemoryText},
	{"text-folded", MemorySet, `{"scope":"channel","key":"k","Text":"t"}`, ErrMemoryText},
	{"query-not-string", MemoryGet, `{"scope":"channel","query":[1]}`, nil},
	{"query-null", MemoryGet, `{"scope":"channel","query":null}`, nil},
	{"get-text-ignored", MemoryGet, `{"scope":"channel","text":7}`, nil},
	{"remove-text-ignored", MemoryRemove, `{"scope":"channel","key":"k","text":null}`, nil},
	{"set-query-ignored", MemorySet, `{"scope":"channel","key":"k","text":"t","query":"Q"}`, nil},
	{"unknown-tool-without-key", "x", `{"scope":"channel"}`, ErrMemoryNoKey},
	{"null-input", MemoryGet, `null`, ErrMemoryScope},
	{"leading-vt", MemoryGet, "\v{\"scope\":\"channel\"}", nil},
}

func oldDecodeMemoryCall(tool string, input json.RawMessage) (MemoryCall, error) {
	var fields map[string]json.RawMessage
	if err := decodeObjectStrict(input, &fields); err != nil {
		return MemoryCall{}, ErrMemoryScope
	}
	return oldParseMemoryCall(tool, fields)
}

func oldParseMemoryCall(tool string, input map[string]json.RawMessage) (MemoryCall, error) {
	c := MemoryCall{Tool: tool}
	switch s, _ := jsonString(input["scope"]); s {
	case ScopeSpeaker, ScopeChannel:
		c.Scope = s
	default:
		return MemoryCall{}, ErrMemoryScope
	}
	if raw, ok := jsonString(input["key"]); ok {
		c.Key, c.HasKey = rtsandbox.TrimJS(raw), true
		if n := rtsandbox.UTF16Len(c.Key); n < 1 || n > rtsandbox.MaxMemoryKey {
			return MemoryCall{}, ErrMemoryKey
		}
	}
	if tool == MemoryGet {
		q, _ := jsonString(input["query"])
		c.Query = strings.ToLower(q)
		return c, nil
	}
	if !c.HasKey {
		return MemoryCall{}, ErrMemoryNoKey
	}
	switch tool {
	case MemoryRemove:
	case MemorySet:
		text, ok := jsonString(input["text"])
		if !ok || rtsandbox.TrimJS(text) == "" || rtsandbox.UTF16Len(text) > rtsandbox.MaxMemoryText {
			return MemoryCall{}, ErrMemoryText
		}
		c.Text = text
	default:
		return MemoryCall{}, ErrMemoryTool
	}
	return c, nil
}
