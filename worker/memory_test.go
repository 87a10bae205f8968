package worker

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// fields parses a JSON object into tool input fields; it panics on bad
// test data.
func fields(s string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

// newMemory is the store of a turn whose memory is entries, as the worker
// builds it from the turn JSON.
func newMemory(entries ...rtsandbox.MemoryEntry) *memory {
	return &memory{entries: append([]rtsandbox.MemoryEntry{}, entries...)}
}

func mustCall(t *testing.T, m *memory, name, input, speaker string) string {
	t.Helper()
	out, err := m.call(name, fields(input), speaker)
	if err != nil {
		t.Fatalf("call(%s, %s, %s) = %v", name, input, speaker, err)
	}
	return out
}

// The reference's test "Namespaces." Another workspace is now another channel's store; a
// fresh instance on the same workspace is the next turn's store, built from
// the entries this one returns.
func TestMemoryNamespaces(t *testing.T) {
	a := newMemory()
	other := newMemory()
	mustCall(t, a, "memory_set", `{"scope":"speaker","key":"drink","text":"Tea","speaker":"victim"}`, "alice")
	if got := mustCall(t, a, "memory_get", `{"scope":"speaker"}`, "bob"); got != "[]" {
		t.Errorf("bob speaker get = %s; want []", got)
	}
	if got := mustCall(t, a, "memory_get", `{"scope":"speaker"}`, "victim"); got != "[]" {
		t.Errorf("victim speaker get = %s; want [] (the speaker argument is ignored)", got)
	}
	if got := mustCall(t, other, "memory_get", `{"scope":"speaker"}`, "alice"); got != "[]" {
		t.Errorf("other channel alice get = %s; want []", got)
	}
	mustCall(t, a, "memory_set", `{"scope":"channel","key":"meeting","text":"Wednesday"}`, "alice")
	if got := mustCall(t, a, "memory_get", `{"scope":"channel","query":"wednesday"}`, "bob"); !strings.Contains(got, "Wednesday") {
		t.Errorf("bob channel query = %s; want Wednesday", got)
	}
	fresh := newMemory(a.entries...)
	if got := mustCall(t, fresh, "memory_get", `{"scope":"speaker","key":"drink"}`, "alice"); got != `[{"key":"drink","text":"Tea"}]` {
		t.Errorf("fresh alice get = %s; want drink=Tea", got)
	}
	if got := mustCall(t, a, "memory_remove", `{"scope":"speaker","key":"drink"}`, "alice"); got != "Forgotten." {
		t.Errorf("remove = %q; want Forgotten.", got)
	}
	if got := mustCall(t, a, "memory_get", `{"scope":"speaker"}`, "alice"); got != "[]" {
		t.Errorf("alice get after remove = %s; want []", got)
	}
	if got := mustCall(t, a, "memory_get", `{"scope":"channel"}`, "alice"); !strings.Contains(got, "Wednesday") {
		t.Errorf("channel get after remove = %s; want Wednesday", got)
	}
}

// The reference's test "Values are data; limits keep state."
func TestMemoryValuesAreDataLimitsKeepState(t *testing.T) {
	m := newMemory()
	mustCall(t, m, "memory_set", `{"scope":"speaker","key":"../../host","text":"plain data"}`, "../../person")
	if got := mustCall(t, m, "memory_get", `{"scope":"speaker","key":"../../host"}`, "../../person"); !strings.Contains(got, "plain data") {
		t.Errorf("get ../../host = %s; want plain data", got)
	}
	bad := []struct{ name, input string }{
		{"memory_set", `{"scope":"owner","key":"x","text":"x"}`},
		{"memory_set", `{"scope":"speaker","key":"x","text":"` + strings.Repeat("x", 2049) + `"}`},
		{"bash", `{"scope":"speaker","key":"x"}`},
	}
	before := slices.Clone(m.entries)
	for _, b := range bad {
		if _, err := m.call(b.name, fields(b.input), "alice"); err == nil {
			t.Errorf("call(%s, %.60s) = nil; want error", b.name, b.input)
		}
	}
	if got := mustCall(t, m, "memory_get", `{"scope":"speaker"}`, "../../person"); !strings.Contains(got, "plain data") {
		t.Errorf("get after failures = %s; want plain data", got)
	}
	want := []rtsandbox.MemoryEntry{{Scope: "speaker:../../person", Key: "../../host", Text: "plain data"}}
	if diff := cmp.Diff(want, m.entries); diff != "" || !slices.Equal(before, m.entries) {
		t.Errorf("store after failures (-want +got):\n%s", diff)
	}
}

func TestMemoryCallRefusals(t *testing.T) {
	tests := []struct {
		name, tool, input string
	}{
		{"scope-missing", "memory_get", `{}`},
		{"scope-owner", "memory_get", `{"scope":"owner"}`},
		{"scope-not-string", "memory_set", `{"scope":["speaker"],"key":"k","text":"t"}`},
		{"scope-checked-before-tool-name", "bash", `{}`},
		{"key-blank", "memory_get", `{"scope":"channel","key":"  "}`},
		{"key-129", "memory_set", `{"scope":"channel","key":"` + strings.Repeat("k", 129) + `","text":"t"}`},
		{"key-129-utf16", "memory_set", `{"scope":"channel","key":"` + strings.Repeat("😀", 65) + `","text":"t"}`},
		{"set-key-not-string-is-absent", "memory_set", `{"scope":"channel","key":7,"text":"t"}`},
		{"remove-without-key", "memory_remove", `{"scope":"channel"}`},
		{"text-missing", "memory_set", `{"scope":"channel","key":"k"}`},
		{"text-blank", "memory_set", `{"scope":"channel","key":"k","text":" \n\ufeff"}`},
		{"text-not-string", "memory_set", `{"scope":"channel","key":"k","text":1}`},
		{"text-2049", "memory_set", `{"scope":"channel","key":"k","text":"` + strings.Repeat("t", 2049) + `"}`},
		{"unknown-tool", "memory_list", `{"scope":"channel","key":"k"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemory(rtsandbox.MemoryEntry{Scope: "channel", Key: "k", Text: "t"})
			if out, err := m.call(tt.tool, fields(tt.input), "alice"); !errors.Is(err, errMemory) {
				t.Errorf("call(%s, %.60s) = %q, %v; want errMemory", tt.tool, tt.input, out, err)
			}
			if want := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: "t"}}; !slices.Equal(want, m.entries) {
				t.Errorf("store after a refusal = %v; want unchanged", m.entries)
			}
		})
	}
}

func TestMemoryKeysAndTexts(t *testing.T) {
	m := newMemory()
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"  a  ","text":"  first  "}`, "alice")
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"b","text":"`+strings.Repeat("😀", 1024)+`"}`, "alice")
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"a","text":"second"}`, "alice")
	want := `[{"key":"b","text":"` + strings.Repeat("😀", 1024) + `"},{"key":"a","text":"second"}]`
	if got := mustCall(t, m, "memory_get", `{"scope":"channel"}`, "bob"); got != want {
		t.Errorf("get = %.80s; want update moved to the end", got)
	}
	if got := mustCall(t, m, "memory_get", `{"scope":"channel","key":7,"query":"SEC"}`, "bob"); got != `[{"key":"a","text":"second"}]` {
		t.Errorf("query with non-string key = %s; want the key ignored", got)
	}
	if got := mustCall(t, m, "memory_get", `{"scope":"channel","query":"a sec"}`, "bob"); got != `[{"key":"a","text":"second"}]` {
		t.Errorf("query across key and text = %s", got)
	}
	if got := mustCall(t, m, "memory_remove", `{"scope":"channel","key":"missing"}`, "bob"); got != "Forgotten." {
		t.Errorf("remove missing = %q; want Forgotten.", got)
	}
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"c","text":"  untrimmed  "}`, "alice")
	if got := mustCall(t, m, "memory_get", `{"scope":"channel","key":" c "}`, "bob"); got != `[{"key":"c","text":"  untrimmed  "}]` {
		t.Errorf("get c = %s; want the text stored untrimmed", got)
	}
}

func TestMemoryCapacity(t *testing.T) {
	var full []rtsandbox.MemoryEntry
	for i := range maxMemoryEntries {
		full = append(full, rtsandbox.MemoryEntry{Scope: "channel", Key: "k" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Text: "t"})
	}
	m := newMemory(full...)
	if _, err := m.call("memory_set", fields(`{"scope":"channel","key":"new","text":"t"}`), "alice"); !errors.Is(err, errMemory) || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("257th set = %v; want capacity error", err)
	}
	if !slices.Equal(full, m.entries) {
		t.Errorf("a refused set changed the store")
	}
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"`+full[0].Key+`","text":"replaced"}`, "alice")
	if len(m.entries) != maxMemoryEntries || m.entries[maxMemoryEntries-1].Text != "replaced" {
		t.Errorf("replacing an entry of a full store: %d entries, last %+v", len(m.entries), m.entries[len(m.entries)-1])
	}

	// 512 KiB: 255 entries of 2,048 CJK characters (3 bytes each) are
	// about 1.5 MiB, so the byte cap binds long before the entry cap.
	m2 := newMemory()
	var err error
	n := 0
	for ; err == nil && n < maxMemoryEntries; n++ {
		_, err = m2.call("memory_set", fields(`{"scope":"channel","key":"k`+strings.Repeat("x", n)+`","text":"`+strings.Repeat("\u4e01", 2048)+`"}`), "alice")
	}
	if !errors.Is(err, errMemory) || n > 90 {
		t.Errorf("byte cap: set %d entries, last error %v; want the capacity error near 85", n, err)
	}
	if size := jsonjs.Size(m2.entries); size > maxMemoryBytes || len(m2.entries) != n-1 {
		t.Errorf("store is %d bytes in %d entries; want ≤ %d bytes and the refused entry left out", size, len(m2.entries), maxMemoryBytes)
	}
}

// The tools build a new list: the turn's memory the store started from is
// never changed in place.
func TestMemoryLeavesTurnMemoryUnchanged(t *testing.T) {
	turn := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "a", Text: "1"}, {Scope: "channel", Key: "b", Text: "2"}}
	orig := slices.Clone(turn)
	m := &memory{entries: turn}
	mustCall(t, m, "memory_set", `{"scope":"channel","key":"a","text":"changed"}`, "alice")
	mustCall(t, m, "memory_remove", `{"scope":"channel","key":"b"}`, "alice")
	if !slices.Equal(orig, turn) {
		t.Errorf("turn memory = %v; want unchanged %v", turn, orig)
	}
	if want := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "a", Text: "changed"}}; !slices.Equal(want, m.entries) {
		t.Errorf("store = %v; want %v", m.entries, want)
	}
}
