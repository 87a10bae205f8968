package inflight_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/inflight"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

// open opens a journal on dir, its log in buf, closed when t ends.
func open(t *testing.T, dir string) (*inflight.Journal, []inflight.Entry, *syncbuf.Buffer) {
	t.Helper()
	buf := &syncbuf.Buffer{}
	j, prev := inflight.Open(dir, slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { j.Close() })
	return j, prev, buf
}

// The messages in flight when a journal stops are the next one's, in the
// order they were taken, and stay recorded until they are ended.
func TestJournalCarriesMessagesToNextStart(t *testing.T) {
	dir := t.TempDir()
	j, prev, _ := open(t, dir)
	if len(prev) != 0 {
		t.Fatalf("first start found %v", prev)
	}
	j.Begin("http:lobby", "m_1")
	j.Begin("discord:42", "1234567890")
	j.Begin("http:lobby", "m_2")
	j.End("http:lobby", "m_1")
	j.Close()

	j2, prev, _ := open(t, dir)
	want := []inflight.Entry{{Channel: "discord:42", ID: "1234567890"}, {Channel: "http:lobby", ID: "m_2"}}
	if diff := cmp.Diff(want, prev); diff != "" {
		t.Errorf("entries after the restart (-want +got):\n%s", diff)
	}
	j2.End("discord:42", "1234567890")
	j2.Close()
	_, prev, _ = open(t, dir)
	if diff := cmp.Diff([]inflight.Entry{{Channel: "http:lobby", ID: "m_2"}}, prev); diff != "" {
		t.Errorf("entries after one was told (-want +got):\n%s", diff)
	}
}

// A message past a bound is not recorded, and the log says so once per
// run of refusals; the file holds only what is within the bounds.
func TestJournalBounds(t *testing.T) {
	dir := t.TempDir()
	j, _, logs := open(t, dir)
	j.Begin("http:lobby", strings.Repeat("i", inflight.MaxIDBytes+1))
	j.Begin("http:lobby", "bad\nid")
	j.Begin("http:"+rtsandbox.ChannelKey(strings.Repeat("c", rtsandbox.MaxChannelKey)), "m_1")
	j.Begin("not a key", "m_1")
	if n := j.Len(); n != 0 {
		t.Errorf("%d entries recorded past the bounds", n)
	}
	if n := strings.Count(logs.String(), "message not recorded in flight"); n != 1 {
		t.Errorf("%d refusal lines; want 1:\n%s", n, logs.String())
	}
	for i := range inflight.MaxEntries + 1 {
		j.Begin("http:lobby", fmt.Sprintf("m_%d", i))
	}
	if n := j.Len(); n != inflight.MaxEntries {
		t.Errorf("%d entries; want at most %d", n, inflight.MaxEntries)
	}
	if n := strings.Count(logs.String(), "message not recorded in flight"); n != 2 {
		t.Errorf("%d refusal lines; want 2 (one per run):\n%s", n, logs.String())
	}
	j.Close()
	if _, prev, _ := open(t, dir); len(prev) != inflight.MaxEntries {
		t.Errorf("%d entries read back; want %d", len(prev), inflight.MaxEntries)
	}
}

// A record that does not parse, or is a link planted at its path, is
// logged with its path and gives no entries; the next save replaces it
// (the link itself, never what it points to).
func TestJournalUnusableRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) { os.WriteFile(path, []byte("\x00 not json"), 0o600) }},
		{"link", func(t *testing.T, path string) {
			outside := filepath.Join(t.TempDir(), "owner.json")
			os.WriteFile(outside, []byte(`{"version":1,"messages":[{"channel":"http:x","id":"m"}]}`), 0o600)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if b, _ := os.ReadFile(outside); !strings.Contains(string(b), `"http:x"`) {
					t.Errorf("the link's target was written: %s", b)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, inflight.FileName)
			tc.plant(t, path)
			j, prev, logs := open(t, dir)
			if len(prev) != 0 || !strings.Contains(logs.String(), "in-flight record unusable") || !strings.Contains(logs.String(), path) {
				t.Errorf("entries %v, log %s; want none and the file named", prev, logs.String())
			}
			j.Begin("http:lobby", "m_1")
			j.Close()
			if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("record after a save: %v %v; want a regular file", fi, err)
			}
			if _, prev, _ := open(t, dir); len(prev) != 1 {
				t.Errorf("entries after the save = %v; want the new one", prev)
			}
		})
	}
}

// Parse takes only the file's own shape within its bounds.
func TestParse(t *testing.T) {
	entry := func(ch, id string) string { return `{"channel":"` + ch + `","id":"` + id + `"}` }
	many := make([]string, inflight.MaxEntries+1)
	for i := range many {
		many[i] = entry("http:x", fmt.Sprint(i))
	}
	for _, tc := range []struct {
		name, data string
		want       []inflight.Entry
		wantErr    bool
	}{
		{"empty", `{"version":1,"messages":[]}`, []inflight.Entry{}, false},
		{"two", `{"version":1,"messages":[` + entry("http:a", "m_1") + `,` + entry("discord:1", "2") + `]}`,
			[]inflight.Entry{{Channel: "http:a", ID: "m_1"}, {Channel: "discord:1", ID: "2"}}, false},
		{"duplicate", `{"version":1,"messages":[` + entry("http:a", "m") + `,` + entry("http:a", "m") + `]}`,
			[]inflight.Entry{{Channel: "http:a", ID: "m"}}, false},
		{"unknown key", `{"version":1,"messages":[],"x":1}`, nil, true},
		{"unknown entry key", `{"version":1,"messages":[{"channel":"http:a","id":"m","x":1}]}`, nil, true},
		{"trailing data", `{"version":1,"messages":[]} {}`, nil, true},
		{"version", `{"version":2,"messages":[]}`, nil, true},
		{"no version", `{"messages":[]}`, nil, true},
		{"bad channel", `{"version":1,"messages":[` + entry("lobby", "m") + `]}`, nil, true},
		{"empty id", `{"version":1,"messages":[` + entry("http:a", "") + `]}`, nil, true},
		{"control in id", `{"version":1,"messages":[` + entry("http:a", `m\u0007`) + `]}`, nil, true},
		{"long id", `{"version":1,"messages":[` + entry("http:a", strings.Repeat("i", inflight.MaxIDBytes+1)) + `]}`, nil, true},
		{"too many", `{"version":1,"messages":[` + strings.Join(many, ",") + `]}`, nil, true},
		{"not an object", `[]`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := inflight.Parse([]byte(tc.data))
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, inflight.ErrState)) {
				t.Fatalf("Parse = %v; want error %v (ErrState)", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse holds Parse to its bounds: what it accepts is at most
// MaxEntries distinct entries within the bounds, and reads back the same
// once written as a record.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":1,"messages":[{"channel":"http:a","id":"m_1"},{"channel":"discord:1","id":"2"}]}`))
	f.Add([]byte(`{"version":1,"messages":[{"channel":"http:a","id":"m\u0007"}]}`))
	f.Add([]byte(`{"version":1,"messages":[]} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := inflight.Parse(data)
		if err != nil {
			return
		}
		if len(got) > inflight.MaxEntries {
			t.Fatalf("%d entries", len(got))
		}
		seen := map[inflight.Entry]bool{}
		for _, e := range got {
			if seen[e] || !e.Channel.Valid() || e.ID == "" || len(e.ID) > inflight.MaxIDBytes {
				t.Fatalf("accepted %+v", e)
			}
			seen[e] = true
		}
		again, _ := json.Marshal(map[string]any{"version": 1, "messages": got})
		back, err := inflight.Parse(again)
		if err != nil || !cmp.Equal(got, back) {
			t.Fatalf("read back %v, %v; want %v", back, err, got)
		}
	})
}
