package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const testHeader = `{"type":"session","format":"rtsandbox-session","version":2,"id":"s","created":"2026-12-01T19:40:00Z"}`

// testHeaderV1 is the header of a file written before privateTo.
const testHeaderV1 = `{"type":"session","format":"rtsandbox-session","version":1,"id":"s","created":"2026-12-01T19:40:00Z"}`

// turnLines is the records of one whole exchange: user text, answer.
func turnLines(id, user, answer string) string {
	return `{"type":"reader","turnId":"` + id + `","reader":"ann","privateMemory":false}
{"type":"message","turnId":"` + id + `","message":{"role":"user","content":"` + user + `"}}
{"type":"message","turnId":"` + id + `","message":{"role":"assistant","content":"` + answer + `"}}
{"type":"end","turnId":"` + id + `","ok":true}
`
}

// userTexts is the user contents of the exchanges.
func userTexts(xs []sessionExchange) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, x.messages[0].Content)
	}
	return out
}

// parseSession keeps whole, ok turns and skips everything else rather
// than failing: torn and corrupt lines, turns cut by a crash, failed
// turns, broken tool pairing, records of unknown types.
func TestParseSession(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    []string
		wantErr bool
	}{
		{"two turns", testHeader + "\n" + turnLines("a", "1", "x") + turnLines("b", "2", "y"), []string{"1", "2"}, false},
		{"torn last line", testHeader + "\n" + turnLines("a", "1", "x") + `{"type":"reader","turnId":"b","rea`, []string{"1"}, false},
		{"corrupt line in a turn", testHeader + "\n" + strings.Replace(turnLines("a", "1", "x"), `{"type":"message","turnId":"a","message":{"role":"assistant"`, `{garbage`, 1) + turnLines("b", "2", "y"), []string{"2"}, false},
		{"turn without end", testHeader + "\n" + strings.TrimSuffix(turnLines("a", "1", "x"), `{"type":"end","turnId":"a","ok":true}`+"\n") + turnLines("b", "2", "y"), []string{"2"}, false},
		{"failed turn", testHeader + "\n" + strings.Replace(turnLines("a", "1", "x"), `"ok":true`, `"ok":false`, 1), []string{}, false},
		{"unknown record types", testHeader + "\n" + `{"type":"compaction","turnId":"z"}` + "\n" + turnLines("a", "1", "x"), []string{"1"}, false},
		{"orphan tool result", testHeader + "\n" + `{"type":"reader","turnId":"a","reader":"ann"}
{"type":"message","turnId":"a","message":{"role":"user","content":"1"}}
{"type":"message","turnId":"a","message":{"role":"tool","tool_call_id":"c","content":"r"}}
{"type":"message","turnId":"a","message":{"role":"assistant","content":"x"}}
{"type":"end","turnId":"a","ok":true}
`, []string{}, false},
		{"tool call answered", testHeader + "\n" + `{"type":"reader","turnId":"a","reader":"ann"}
{"type":"message","turnId":"a","message":{"role":"user","content":"1"}}
{"type":"message","turnId":"a","message":{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"host_x","arguments":"{}"}}]}}
{"type":"message","turnId":"a","message":{"role":"tool","tool_call_id":"c","content":"r"}}
{"type":"message","turnId":"a","message":{"role":"assistant","content":"x"}}
{"type":"end","turnId":"a","ok":true}
`, []string{"1"}, false},
		{"no header", turnLines("a", "1", "x"), nil, true},
		{"version 1", testHeaderV1 + "\n" + turnLines("a", "1", "x"), []string{"1"}, false},
		{"other version", strings.Replace(testHeader, `"version":2`, `"version":3`, 1) + "\n" + turnLines("a", "1", "x"), nil, true},
		{"pi session file", `{"type":"session","version":3,"id":"x","cwd":"/workspace"}` + "\n", nil, true},
		{"empty", "", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, err := parseSession([]byte(tc.data))
			xs := log.exchanges
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v; want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, userTexts(xs)); diff != "" {
				t.Errorf("exchanges (-want +got):\n%s", diff)
			}
		})
	}
}

// openSessionStore continues the newest usable file: an unreadable or
// foreign newer file is ignored (and reported), a symlinked .jsonl is
// never followed, and subdirectories (archive/) are not looked into.
func TestOpenSessionStorePicksRecent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		mod := time.Now().Add(-age)
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	write("old.jsonl", testHeader+"\n"+turnLines("a", "old", "x"), 3*time.Hour)
	write("mid.jsonl", testHeader+"\n"+turnLines("a", "mid", "x"), 2*time.Hour)
	write("newest-garbage.jsonl", "\x00\x01 not json", time.Hour)
	write("notes.txt", testHeader+"\n"+turnLines("a", "txt", "x"), 0)
	outside := filepath.Join(t.TempDir(), "owner.jsonl")
	os.WriteFile(outside, []byte(testHeader+"\n"+turnLines("a", "outside", "x")), 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, "zz-link.jsonl")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "archive", "t"), 0o700)
	write(filepath.Join("archive", "t", "archived.jsonl"), testHeader+"\n"+turnLines("a", "archived", "x"), 0)

	var ignored []string
	s := openSessionStore(dir, sessionHistoryBudget, time.Now, func(name string, err error) { ignored = append(ignored, name) })
	if s.file != filepath.Join(dir, "mid.jsonl") {
		t.Errorf("continued %q; want mid.jsonl", s.file)
	}
	if diff := cmp.Diff([]string{"mid"}, userTexts(s.exchanges)); diff != "" {
		t.Errorf("exchanges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"newest-garbage.jsonl"}, ignored); diff != "" {
		t.Errorf("ignored (-want +got):\n%s", diff)
	}
}

// A file over maxSessionRead is read as its header and its tail: the
// newest exchanges survive, the worker's memory stays bounded.
func TestOpenSessionStoreOversized(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(testHeader + "\n" + turnLines("a", "lost", "x"))
	pad := strings.Repeat("p", 1<<20)
	for b.Len() <= maxSessionRead {
		b.WriteString(pad + "\n")
	}
	b.WriteString(turnLines("b", "kept", "y"))
	if err := os.WriteFile(filepath.Join(dir, "big.jsonl"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openSessionStore(dir, sessionHistoryBudget, time.Now, func(name string, err error) { t.Errorf("ignored %s: %v", name, err) })
	if diff := cmp.Diff([]string{"kept"}, userTexts(s.exchanges)); diff != "" {
		t.Errorf("exchanges (-want +got):\n%s", diff)
	}
}

// The history kept in memory (since the last compaction) is bounded by
// whole exchanges, oldest dropped first.
func TestSessionHistoryBudget(t *testing.T) {
	const budget = 400_000
	big := strings.Repeat("b", budget/4) // four do not fit with their JSON around them
	s := &sessionStore{dir: t.TempDir(), now: time.Now, budget: budget}
	for i, id := range []string{"t1", "t2", "t3", "t4"} {
		turn := wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "ann"}}
		if err := s.begin(turn); err != nil {
			t.Fatal(err)
		}
		msgs := []message{{Role: "user", Content: string(rune('1'+i)) + big}, {Role: "assistant", Content: "ok"}}
		if err := s.finish(id, true, msgs); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, x := range s.exchanges {
		got = append(got, x.turnID)
	}
	if diff := cmp.Diff([]string{"t2", "t3", "t4"}, got); diff != "" {
		t.Errorf("kept exchanges (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(s.file)
	if err != nil {
		t.Fatal(err)
	}
	log, err := parseSession(data)
	all := log.exchanges
	if err != nil || len(all) != 4 {
		t.Errorf("file holds %d exchanges (%v); want all 4", len(all), err)
	}
}

// The session writer refuses to write through a link planted at its file.
func TestSessionWriteRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "owner.jsonl")
	os.WriteFile(outside, []byte("owner\n"), 0o600)
	link := filepath.Join(dir, "s.jsonl")
	os.Symlink(outside, link)
	s := &sessionStore{dir: dir, now: time.Now, file: link}
	if err := s.begin(wire.SessionTurn{TurnID: "t"}); err == nil {
		t.Error("write through a symlink succeeded")
	}
	if data, _ := os.ReadFile(outside); string(data) != "owner\n" {
		t.Errorf("outside file changed: %q", data)
	}
}

func FuzzParseSession(f *testing.F) {
	f.Add([]byte(testHeader + "\n" + turnLines("a", "1", "x")))
	f.Add([]byte(testHeader + "\n" + `{"type":"message","turnId":"","message":{"role":"user","content":"x"}}` + "\n"))
	f.Add([]byte(`{"type":"session"}`))
	f.Add([]byte(testHeader + "\n" + turnLines("a", "1", "x") + `{"type":"compaction","turnId":"b","summary":"S","keep":0,"engine":"pi"}` + "\n"))
	f.Add([]byte(testHeader + "\n" + turnLines("a", "1", "x") + `{"type":"message","turnId":"a","message":{"role":"tool","tool_call_id":"c","content":"r"},"privateTo":"ann"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		log, err := parseSession(data)
		xs := log.exchanges
		if err != nil && len(xs) > 0 {
			t.Fatal("exchanges with an error")
		}
		if c := log.compacted; c != nil && (c.summary == "" || rtsandbox.UTF16Len(c.summary) > maxSummary ||
			(c.engine != engineHost && c.engine != engineWorker) || log.version != sessionVersion) {
			t.Fatalf("kept a compaction %+v", c)
		}
		for _, x := range xs {
			if !wholeExchange(x.messages) {
				t.Fatalf("kept a broken exchange %+v", x.messages)
			}
		}
	})
}

// In exchange mode fitContext drops history a whole exchange at a time,
// so a tool reply never outlives its call, then the turn's own oldest
// tool groups.
func TestAgentFitContextExchanges(t *testing.T) {
	big := strings.Repeat("z", 300)
	call := []wire.ToolCall{{ID: "c1", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: "{}"}}}
	a := &agent{model: openaiClient{}, exchanges: true, histLeft: 6, payload: modelPayload{Model: "m", Messages: []message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: "old"}, {Role: "assistant", ToolCalls: call}, {Role: "tool", ToolCallID: "c1", Content: big}, {Role: "assistant", Content: "a1"},
		{Role: "user", Content: "mid"}, {Role: "assistant", Content: "a2"},
		{Role: "user", Content: "now"},
	}}}
	a.maxPayload = jsonjs.Size(a.payload) - 1 // the first exchange must go, whole
	if err := a.fitContext(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range a.payload.Messages {
		got = append(got, m.Role+":"+m.Content)
	}
	if diff := cmp.Diff([]string{"system:s", "user:mid", "assistant:a2", "user:now"}, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if a.histLeft != 2 {
		t.Errorf("histLeft = %d; want 2", a.histLeft)
	}
}
