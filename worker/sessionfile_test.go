package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/wire"
)

// writeSession writes a session file named s.jsonl in a fresh sessions
// directory and returns the directory.
func writeSession(t *testing.T, data string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// appendTurn runs one whole turn through the store: its reader record,
// its messages and its end.
func appendTurn(t *testing.T, s *sessionStore, id, user, answer string) {
	t.Helper()
	if err := s.begin(wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "ann"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.finish(id, true, []message{{Role: "user", Content: user}, {Role: "assistant", Content: answer}}); err != nil {
		t.Fatal(err)
	}
}

// openQuiet opens the store of dir, failing the test on an ignored file.
func openQuiet(t *testing.T, dir string) *sessionStore {
	t.Helper()
	return openSessionStore(dir, sessionHistoryBudget, time.Now, func(name string, err error) { t.Errorf("ignored %s: %v", name, err) })
}

// Issue 22 item 3: a torn last line (a write cut by a crash) costs only
// its own exchange. The next write cuts it off before appending, so the
// next exchange is not merged into it, and the torn line is counted once.
func TestSessionTornTailNotMergedWithNext(t *testing.T) {
	torn := `{"type":"reader","turnId":"b","reader":"ann","privateMemory":false}
{"type":"message","turnId":"b","message":{"role":"user","content":"torn"}}
{"type":"message","turnId":"b","message":{"role":"assis`
	dir := writeSession(t, testHeader+"\n"+turnLines("a", "before", "x")+torn)
	s := openQuiet(t, dir)
	if diff := cmp.Diff([]string{"before"}, userTexts(s.exchanges)); diff != "" {
		t.Errorf("exchanges (-want +got):\n%s", diff)
	}
	// the torn line, and the two whole records of its turn, which never ended
	if got := s.loaded; got != (sessionLoad{droppedLines: 3}) {
		t.Errorf("load = %+v; want 3 dropped lines", got)
	}
	appendTurn(t, s, "c", "after", "y")
	again := openQuiet(t, dir)
	if diff := cmp.Diff([]string{"before", "after"}, userTexts(again.exchanges)); diff != "" {
		t.Errorf("exchanges after the next turn (-want +got):\n%s", diff)
	}
	if got := again.loaded; got != (sessionLoad{droppedLines: 2}) {
		t.Errorf("load after the torn tail was cut = %+v; want the torn turn's 2 whole lines", got)
	}
}

// Issue 22 item 3: a line too long to hold, torn or whole, costs only
// itself: the exchanges before it are read, and the file continues.
func TestSessionLongLineKeepsEarlierExchanges(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 MB of session files")
	}
	long := strings.Repeat("g", maxSessionLine+1)
	for _, tc := range []struct {
		name, tail string
		want       sessionLoad
	}{
		{"whole", long + "\n", sessionLoad{droppedLines: 1}},
		{"torn", long, sessionLoad{droppedLines: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSession(t, testHeader+"\n"+turnLines("a", "one", "x")+turnLines("b", "two", "y")+tc.tail)
			s := openQuiet(t, dir)
			if diff := cmp.Diff([]string{"one", "two"}, userTexts(s.exchanges)); diff != "" {
				t.Errorf("exchanges (-want +got):\n%s", diff)
			}
			if s.loaded != tc.want {
				t.Errorf("load = %+v; want %+v", s.loaded, tc.want)
			}
			appendTurn(t, s, "c", "three", "z")
			again := openQuiet(t, dir)
			if diff := cmp.Diff([]string{"one", "two", "three"}, userTexts(again.exchanges)); diff != "" {
				t.Errorf("exchanges after the next turn (-want +got):\n%s", diff)
			}
		})
	}
}

// Every line parseSession does not keep is counted as dropped, except a
// failed turn's (it failed; nothing is lost) and blank lines.
func TestParseSessionCountsDropped(t *testing.T) {
	a, b := turnLines("a", "1", "x"), turnLines("b", "2", "y")
	for _, tc := range []struct {
		name string
		data string
		want int
	}{
		{"clean", testHeader + "\n" + a + b, 0},
		{"blank lines", testHeader + "\n\n" + a + "\n" + b, 0},
		{"garbage line", testHeader + "\n" + a + "\x00\x01 not json\n" + b, 1},
		{"garbage tail", testHeader + "\n" + a + "\x00\x00\x00\x00", 1},
		{"torn tail", testHeader + "\n" + a + `{"type":"reader","turnId":"b","rea`, 1},
		{"turn without end", testHeader + "\n" + strings.TrimSuffix(a, `{"type":"end","turnId":"a","ok":true}`+"\n") + b, 3},
		{"turn cut at the end", testHeader + "\n" + a + strings.TrimSuffix(b, `{"type":"end","turnId":"b","ok":true}`+"\n"), 3},
		{"failed turn", testHeader + "\n" + strings.Replace(a, `"ok":true`, `"ok":false`, 1) + b, 0},
		{"broken exchange", testHeader + "\n" + strings.Replace(a, `"role":"assistant"`, `"role":"tool"`, 1) + b, 4},
		{"record of no turn", testHeader + "\n" + `{"type":"message","turnId":"z","message":{"role":"user","content":"?"}}` + "\n" + a, 1},
		{"unknown type", testHeader + "\n" + a + `{"type":"note","turnId":""}` + "\n", 1},
		{"invalid compaction", testHeader + "\n" + a + `{"type":"compaction","turnId":"z"}` + "\n", 1},
		{"compacted away", testHeader + "\n" + a + `{"type":"compaction","turnId":"b","summary":"S","keep":0,"engine":"pi"}` + "\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, err := parseSession([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if log.dropped != tc.want {
				t.Errorf("dropped = %d; want %d", log.dropped, tc.want)
			}
		})
	}
}

// A read cut by the bound begins inside a turn: that turn's records
// before the lines read are neither kept nor counted as lost.
func TestSessionCutReadDoesNotCountHead(t *testing.T) {
	f := sessionFile{header: []byte(testHeader), cut: true}
	for line := range strings.SplitSeq(strings.TrimSuffix(turnLines("a", "1", "x")+turnLines("b", "2", "y"), "\n"), "\n") {
		f.lines = append(f.lines, []byte(line))
	}
	f.lines = f.lines[2:] // turn a's reader and user message were before the read
	log, err := parseSessionFile(f)
	if err != nil || log.dropped != 0 || len(log.exchanges) != 1 {
		t.Errorf("parse = %d exchanges, %d dropped, %v; want 1, 0", len(log.exchanges), log.dropped, err)
	}
}

// A store write that fails is cut back: the file keeps whole lines.
func TestSessionWriteCutBackOnFailure(t *testing.T) {
	dir := writeSession(t, testHeader+"\n"+turnLines("a", "1", "x"))
	s := openQuiet(t, dir)
	before, err := os.ReadFile(s.file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.file, os.O_RDONLY, 0) // a write to it fails
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := appendWhole(f, []byte(`{"type":"reader","turnId":"b"}`+"\n")); err == nil {
		t.Fatal("a write to a read-only descriptor succeeded")
	}
	if after, _ := os.ReadFile(s.file); string(after) != string(before) {
		t.Errorf("file after a failed write = %q; want it unchanged", after)
	}
}

// The worker reports what loading the conversation lost in its ready
// handshakes until one is accepted, then never again; the count is in its
// own log too.
func TestSessionReadyReportsLoadOnce(t *testing.T) {
	ws := t.TempDir()
	dir := sessionsDir(ws)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(testHeader+"\n"+turnLines("a", "1", "x")+"garbage\n"), 0o600)
	newer := filepath.Join(dir, "t.jsonl")
	os.WriteFile(newer, []byte("not ours\n"), 0o600)
	later := time.Now().Add(time.Hour)
	os.Chtimes(newer, later, later)

	b := startSessionBroker(t, nil)
	b.refuseReady = 1
	polled := make(chan struct{})
	n := 0
	w := startWorker(t, b, ws, func(o *SessionOptions) {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			if n++; n == 3 {
				close(polled)
			}
			return sleep(ctx, time.Millisecond)
		}
	})
	<-polled
	w.stop(t)
	b.mu.Lock()
	bodies := append([]string(nil), b.readyBodies...)
	b.mu.Unlock()
	report := `"sessionLoad":{"droppedLines":1,"ignoredFiles":1}`
	if len(bodies) < 3 || !strings.Contains(bodies[0], report) || !strings.Contains(bodies[1], report) {
		t.Fatalf("ready bodies %q; want the report in the refused one and the first accepted", bodies)
	}
	for i, body := range bodies[2:] {
		if strings.Contains(body, "sessionLoad") {
			t.Errorf("ready body %d after the accepted report = %s", i+2, body)
		}
	}
	if w.log.count(t, logLinesDropped) != 1 {
		t.Errorf("worker log lacks one %q line:\n%s", logLinesDropped, w.log.String())
	}
}

// FuzzReadSessionFile holds the file reader to the whole-bytes parser:
// for a file within the read bound, both keep the same exchanges and
// count the same dropped lines, whatever the bytes.
func FuzzReadSessionFile(f *testing.F) {
	f.Add([]byte(testHeader + "\n" + turnLines("a", "1", "x") + turnLines("b", "2", "y")))
	f.Add([]byte(testHeader + "\n" + turnLines("a", "1", "x") + `{"type":"reader","turnId":"b","rea`))
	f.Add([]byte(testHeader + "\n\n\n" + turnLines("a", "1", "x") + "\x00\x00\n\n"))
	f.Add([]byte(testHeader))
	f.Add([]byte("\n\n"))
	path := filepath.Join(f.TempDir(), "s.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		want, werr := parseSession(data)
		file, err := readSessionFile(path)
		var got sessionLog
		if err == nil {
			got, err = parseSessionFile(file)
		}
		if err != nil {
			if werr == nil && len(want.exchanges) > 0 {
				t.Fatalf("the reader refused a file the parser reads: %v", err)
			}
			return
		}
		if werr != nil {
			t.Fatalf("the reader read a file the parser refuses: %v", werr)
		}
		if got.dropped != want.dropped || len(got.exchanges) != len(want.exchanges) {
			t.Fatalf("reader: %d exchanges, %d dropped; parser: %d, %d", len(got.exchanges), got.dropped, len(want.exchanges), want.dropped)
		}
	})
}
