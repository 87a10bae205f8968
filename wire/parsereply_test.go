package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// parseReplyCases are ParseReply's table tests; they also seed
// FuzzParseReply.
var parseReplyCases = []struct {
	name    string
	stdout  string
	want    rtsandbox.Reply
	wantErr bool
}{
	{name: "ok", stdout: `{"ok":true,"text":"done"}`, want: rtsandbox.Reply{OK: true, Text: "done"}},
	{name: "not-ok", stdout: `{"ok":false,"text":"no"}`, want: rtsandbox.Reply{Text: "no"}},
	{name: "extra-fields-dropped", stdout: ` {"x":1,"ok":true,"text":"a"}` + "\n", want: rtsandbox.Reply{OK: true, Text: "a"}},
	{name: "duplicate-key-last-wins", stdout: `{"ok":false,"ok":true,"text":"a"}`, want: rtsandbox.Reply{OK: true, Text: "a"}},
	{name: "text-at-limit-cjk", stdout: `{"ok":true,"text":"` + strings.Repeat("\u4e01", 100000) + `"}`, want: rtsandbox.Reply{OK: true, Text: strings.Repeat("\u4e01", 100000)}},
	{name: "text-over-limit", stdout: `{"ok":true,"text":"` + strings.Repeat("a", 100001) + `"}`, wantErr: true},
	// An astral rune is two UTF-16 units: 50,001 of them are 100,002.
	{name: "text-over-limit-astral", stdout: `{"ok":true,"text":"` + strings.Repeat("\U0001F600", 50001) + `"}`, wantErr: true},
	{name: "empty", stdout: ``, wantErr: true},
	{name: "null", stdout: `null`, wantErr: true},
	{name: "array", stdout: `[true,"a"]`, wantErr: true},
	{name: "ok-string", stdout: `{"ok":"true","text":"a"}`, wantErr: true},
	{name: "ok-missing", stdout: `{"text":"a"}`, wantErr: true},
	{name: "ok-null", stdout: `{"ok":null,"text":"a"}`, wantErr: true},
	{name: "text-number", stdout: `{"ok":true,"text":1}`, wantErr: true},
	{name: "text-null", stdout: `{"ok":true,"text":null}`, wantErr: true},
	{name: "trailing-garbage", stdout: `{"ok":true,"text":"a"}x`, wantErr: true},
	{name: "two-objects", stdout: `{"ok":true,"text":"a"}{"ok":true,"text":"b"}`, wantErr: true},
}

func TestParseReply(t *testing.T) {
	for _, tc := range parseReplyCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.ParseReply([]byte(tc.stdout))
			if tc.wantErr {
				if !errors.Is(err, wire.ErrInvalidReply) {
					t.Fatalf("ParseReply(%.40q) = %v, %v; want ErrInvalidReply", tc.stdout, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseReply(%.40q) = %+v, %v; want %+v", tc.stdout, got, err, tc.want)
			}
		})
	}
}

// parseReplyStateCases are the state members of ParseReply's table tests,
// appended to {"ok":true,"text":"a"; they also seed FuzzParseReply.
var parseReplyStateCases = []struct {
	name    string
	state   string
	want    *rtsandbox.ChannelState
	wantErr bool
}{
	{"absent", ``, nil, false},
	{"empty-lists", `,"state":{"memory":[],"history":[]}`, &rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{}}, false},
	{"entries", `,"state":{"memory":[{"scope":"channel","key":"k","text":"t","x":1}],"history":[{"role":"user","content":"hi"}]}`,
		&rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: "t"}}, History: []rtsandbox.HistoryEntry{{Role: "user", Content: "hi"}}}, false},
	{"state-null", `,"state":null`, nil, true},
	{"state-array", `,"state":[]`, nil, true},
	{"memory-missing", `,"state":{"history":[]}`, nil, true},
	{"history-null", `,"state":{"memory":[],"history":null}`, nil, true},
	{"entry-null", `,"state":{"memory":[null],"history":[]}`, nil, true},
	{"text-number", `,"state":{"memory":[{"scope":"channel","key":"k","text":1}],"history":[]}`, nil, true},
	{"content-missing", `,"state":{"memory":[],"history":[{"role":"user"}]}`, nil, true},
}

// TestParseReplyState: the state a worker returns is decoded by type; its
// limits are the state store's to check.
func TestParseReplyState(t *testing.T) {
	for _, tc := range parseReplyStateCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.ParseReply([]byte(stateReply(tc.state)))
			if tc.wantErr {
				if !errors.Is(err, wire.ErrInvalidReply) {
					t.Fatalf("ParseReply = %+v, %v; want ErrInvalidReply", got, err)
				}
				return
			}
			if err != nil || !cmp.Equal(tc.want, got.State) {
				t.Fatalf("ParseReply state = %+v, %v; want %+v", got.State, err, tc.want)
			}
		})
	}
}

func stateReply(state string) string { return `{"ok":true,"text":"a"` + state + `}` }

// FuzzParseReply: ParseReply reads what a guest-controlled worker prints,
// so on any input it must return either a reply within the limits or an
// error of the ErrInvalidReply class, and an accepted reply must survive
// its own encoding unchanged (the host never keeps more than it checked).
func FuzzParseReply(f *testing.F) {
	// The table's limit cases (replies of 300 KB) stay in the table tests:
	// as seeds every mutation of them costs milliseconds, and the fuzz
	// smoke's 20,000 runs took minutes.
	for _, tc := range parseReplyCases {
		if len(tc.stdout) <= 4<<10 {
			f.Add([]byte(tc.stdout))
		}
	}
	for _, tc := range parseReplyStateCases {
		f.Add([]byte(stateReply(tc.state)))
	}
	f.Fuzz(func(t *testing.T, stdout []byte) {
		got, err := wire.ParseReply(stdout)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidReply) {
				t.Fatalf("ParseReply error %v is not ErrInvalidReply", err)
			}
			return
		}
		if n := rtsandbox.UTF16Len(got.Text); n > rtsandbox.MaxReplyText {
			t.Fatalf("accepted text of %d UTF-16 units", n)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("accepted reply does not encode: %v", err)
		}
		back, err := wire.ParseReply(again)
		if err != nil {
			t.Fatalf("re-encoded reply %s refused: %v", again, err)
		}
		if diff := cmp.Diff(got, back); diff != "" {
			t.Fatalf("reply changed through its encoding (-first +second):\n%s", diff)
		}
	})
}
