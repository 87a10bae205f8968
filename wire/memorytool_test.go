package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// TestParseMemoryCall: the input rules of docs/protocol.md, "Memory tools" in their order,
// shared by the sealed worker and the host's session tools.
func TestParseMemoryCall(t *testing.T) {
	tests := []struct {
		name, tool, input string
		want              MemoryCall
		err               error
	}{
		{"set", MemorySet, `{"scope":"speaker","key":" k ","text":" t "}`, MemoryCall{Tool: MemorySet, Scope: ScopeSpeaker, Key: "k", HasKey: true, Text: " t "}, nil},
		{"get-all", MemoryGet, `{"scope":"channel"}`, MemoryCall{Tool: MemoryGet, Scope: ScopeChannel}, nil},
		{"get-query-lowered", MemoryGet, `{"scope":"channel","query":"WeD"}`, MemoryCall{Tool: MemoryGet, Scope: ScopeChannel, Query: "wed"}, nil},
		{"get-key-not-string-absent", MemoryGet, `{"scope":"channel","key":7}`, MemoryCall{Tool: MemoryGet, Scope: ScopeChannel}, nil},
		{"remove", MemoryRemove, `{"scope":"channel","key":"k","text":"ignored"}`, MemoryCall{Tool: MemoryRemove, Scope: ScopeChannel, Key: "k", HasKey: true}, nil},
		{"extra-members-ignored", MemorySet, `{"scope":"speaker","key":"k","text":"t","speaker":"victim","principalId":"x"}`, MemoryCall{Tool: MemorySet, Scope: ScopeSpeaker, Key: "k", HasKey: true, Text: "t"}, nil},
		{"key-128-utf16", MemorySet, `{"scope":"channel","key":"` + strings.Repeat("😀", 64) + `","text":"t"}`, MemoryCall{Tool: MemorySet, Scope: ScopeChannel, Key: strings.Repeat("😀", 64), HasKey: true, Text: "t"}, nil},
		{"text-u0085-is-not-blank", MemorySet, `{"scope":"channel","key":"k","text":"\u0085"}`, MemoryCall{Tool: MemorySet, Scope: ScopeChannel, Key: "k", HasKey: true, Text: "\u0085"}, nil},
		{"scope-missing", MemoryGet, `{}`, MemoryCall{}, ErrMemoryScope},
		{"scope-other-speaker", MemoryGet, `{"scope":"speaker:bob"}`, MemoryCall{}, ErrMemoryScope},
		{"scope-not-string", MemorySet, `{"scope":["speaker"],"key":"k","text":"t"}`, MemoryCall{}, ErrMemoryScope},
		{"scope-before-tool-name", "bash", `{}`, MemoryCall{}, ErrMemoryScope},
		{"not-an-object", MemoryGet, `"speaker"`, MemoryCall{}, ErrMemoryScope},
		{"trailing-data", MemoryGet, `{"scope":"channel"} {}`, MemoryCall{}, ErrMemoryScope},
		{"key-blank", MemoryGet, `{"scope":"channel","key":"  "}`, MemoryCall{}, ErrMemoryKey},
		{"key-129", MemorySet, `{"scope":"channel","key":"` + strings.Repeat("k", 129) + `","text":"t"}`, MemoryCall{}, ErrMemoryKey},
		{"key-129-utf16", MemorySet, `{"scope":"channel","key":"` + strings.Repeat("😀", 65) + `","text":"t"}`, MemoryCall{}, ErrMemoryKey},
		{"set-key-not-string-absent", MemorySet, `{"scope":"channel","key":7,"text":"t"}`, MemoryCall{}, ErrMemoryNoKey},
		{"remove-without-key", MemoryRemove, `{"scope":"channel"}`, MemoryCall{}, ErrMemoryNoKey},
		{"text-missing", MemorySet, `{"scope":"channel","key":"k"}`, MemoryCall{}, ErrMemoryText},
		{"text-blank", MemorySet, `{"scope":"channel","key":"k","text":" \n\ufeff"}`, MemoryCall{}, ErrMemoryText},
		{"text-not-string", MemorySet, `{"scope":"channel","key":"k","text":1}`, MemoryCall{}, ErrMemoryText},
		{"text-2049", MemorySet, `{"scope":"channel","key":"k","text":"` + strings.Repeat("t", 2049) + `"}`, MemoryCall{}, ErrMemoryText},
		{"unknown-tool", "memory_list", `{"scope":"channel","key":"k"}`, MemoryCall{}, ErrMemoryTool},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeMemoryCall(tc.tool, json.RawMessage(tc.input))
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, ErrMemoryRefused) || !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Errorf("DecodeMemoryCall = %+v, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("call (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMemoryCallApplySelect: a set appends (an update moves to the end), a
// remove of nothing still succeeds, neither changes its input slice, and
// get lists one scope in stored order.
func TestMemoryCallApplySelect(t *testing.T) {
	in := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "a", Text: "1"}, {Scope: "speaker:x", Key: "a", Text: "2"}, {Scope: "channel", Key: "b", Text: "3"}}
	orig := append([]rtsandbox.MemoryEntry(nil), in...)
	set := MemoryCall{Tool: MemorySet, Scope: ScopeChannel, Key: "a", HasKey: true, Text: "new"}
	next, res := set.Apply(in, set.StoredScope("x"))
	if want := []rtsandbox.MemoryEntry{{Scope: "speaker:x", Key: "a", Text: "2"}, {Scope: "channel", Key: "b", Text: "3"}, {Scope: "channel", Key: "a", Text: "new"}}; !cmp.Equal(want, next) || res != MemorySaved {
		t.Errorf("set = %v, %q", next, res)
	}
	rm := MemoryCall{Tool: MemoryRemove, Scope: ScopeSpeaker, Key: "none", HasKey: true}
	if next, res := rm.Apply(in, rm.StoredScope("x")); !cmp.Equal(orig, next) || res != MemoryForgotten {
		t.Errorf("remove nothing = %v, %q", next, res)
	}
	if !cmp.Equal(orig, in) {
		t.Errorf("input changed: %v", in)
	}
	get := MemoryCall{Tool: MemoryGet, Scope: ScopeSpeaker}
	if got := get.Select(in, get.StoredScope("x")); !cmp.Equal([]MemoryItem{{"a", "2"}}, got) {
		t.Errorf("select = %v", got)
	}
	if got := get.Select(in, get.StoredScope("y")); got == nil || len(got) != 0 {
		t.Errorf("select of an empty scope = %#v; want an empty, non-nil list", got)
	}
}

// FuzzDecodeMemoryCall: any input to a memory tool is refused with a
// MemoryRefusal or gives a call within the rules.
func FuzzDecodeMemoryCall(f *testing.F) {
	f.Add(MemorySet, []byte(`{"scope":"speaker","key":"k","text":"t"}`))
	f.Add(MemoryGet, []byte(`{"scope":"channel","key":7,"query":"Q"}`))
	f.Add(MemoryRemove, []byte(`{"scope":"speaker:bob","key":"\ud800"}`))
	f.Add("bash", []byte(`[]`))
	f.Fuzz(func(t *testing.T, tool string, input []byte) {
		c, err := DecodeMemoryCall(tool, input)
		if err != nil {
			var r MemoryRefusal
			if !errors.As(err, &r) || !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Fatalf("error %v is not a refusal", err)
			}
			return
		}
		switch {
		case c.Scope != ScopeSpeaker && c.Scope != ScopeChannel,
			c.HasKey && (rtsandbox.UTF16Len(c.Key) < 1 || rtsandbox.UTF16Len(c.Key) > rtsandbox.MaxMemoryKey || rtsandbox.TrimJS(c.Key) != c.Key),
			c.Tool != MemoryGet && !c.HasKey,
			c.Tool == MemorySet && (rtsandbox.TrimJS(c.Text) == "" || rtsandbox.UTF16Len(c.Text) > rtsandbox.MaxMemoryText),
			c.Tool != MemorySet && c.Tool != MemoryGet && c.Tool != MemoryRemove,
			c.Query != strings.ToLower(c.Query):
			t.Fatalf("DecodeMemoryCall(%q, %q) = %+v", tool, input, c)
		}
	})
}

// TestMemoryCallValidate: a call built in Go is held to the input rules
// ParseMemoryCall applies, in the same order.
func TestMemoryCallValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    MemoryCall
		err  error
	}{
		{"set", MemoryCall{Tool: MemorySet, Scope: ScopeChannel, Key: "k", HasKey: true, Text: "t"}, nil},
		{"get-no-key", MemoryCall{Tool: MemoryGet, Scope: ScopeSpeaker}, nil},
		{"scope-first", MemoryCall{Tool: "x", Scope: "speaker:bob", HasKey: true}, ErrMemoryScope},
		{"key-empty", MemoryCall{Tool: MemoryGet, Scope: ScopeChannel, HasKey: true}, ErrMemoryKey},
		{"no-key", MemoryCall{Tool: MemoryRemove, Scope: ScopeChannel}, ErrMemoryNoKey},
		{"tool", MemoryCall{Tool: "memory_list", Scope: ScopeChannel, Key: "k", HasKey: true}, ErrMemoryTool},
		{"text-blank", MemoryCall{Tool: MemorySet, Scope: ScopeChannel, Key: "k", HasKey: true, Text: " "}, ErrMemoryText},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Validate(); err != tc.err {
				t.Fatalf("Validate() = %v; want %v", err, tc.err)
			}
		})
	}
}
