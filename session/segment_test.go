package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// unescapeSegment decodes an escaped (not hashed) segment back to its
// key: the proof that the escaped forms are injective.
func unescapeSegment(seg string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		switch c := seg[i]; c {
		case '_':
			b.WriteByte(':')
		case '.':
			if i+2 >= len(seg) {
				return "", false
			}
			v, err := hex.DecodeString(seg[i+1 : i+3])
			if err != nil {
				return "", false
			}
			b.Write(v)
			i += 2
		case '+':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// segmentName is what every segment is made of.
var segmentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,27}$`)

// Issue 21 item 6a: channel directory names are injective. Keys the lossy
// name merged get names of their own; Discord keys keep the name they had;
// a key whose escaped form is too long is hashed, within the socket path
// bound.
func TestSegment(t *testing.T) {
	long := "http:" + strings.Repeat("x", 200)
	for _, tc := range []struct{ key, want string }{
		{"discord:123456789012345678", "discord_123456789012345678"},
		{"http:lobby", "http_lobby"},
		{"http:a.b", "http_a.2eb"},
		{"http:a_b", "http_a.5fb"},
		{"http:a:b", "http_a_b"},
		{"my_kind:x", "my.5fkind_x"},
		{"http:Ab-9", "http_Ab-9"},
		{"http:é", "http_.c3.a9"},
		{"console:", "console_"},
		{long, "http_xxxxxx+" + hashOf(long)},
		{"http:" + strings.Repeat(".", 30), "http_.2e.2e+" + hashOf("http:"+strings.Repeat(".", 30))},
	} {
		got := Segment(rtsandbox.ChannelKey(tc.key))
		if got != tc.want {
			t.Errorf("Segment(%q) = %q; want %q", tc.key, got, tc.want)
		}
		if !segmentName.MatchString(got) {
			t.Errorf("Segment(%q) = %q: not a segment name", tc.key, got)
		}
	}
	if a, b := Segment("http:a.b"), Segment("http:a_b"); a == b {
		t.Errorf("http:a.b and http:a_b share %q", a)
	}
	if got := Segment("discord:1"); got != legacySegment("discord:1") {
		t.Errorf("a Discord key's segment changed: %q, was %q", got, legacySegment("discord:1"))
	}
}

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// FuzzSegment holds Segment to its contract for any two valid keys:
// different keys never share a segment; every segment is a name of
// [A-Za-z0-9_.+-], at most 28 bytes (the socket path bound), never "."
// or "..", and either decodes back to its key or is a hashed name (with
// "+", which no escaped name has).
func FuzzSegment(f *testing.F) {
	for _, pair := range [][2]string{
		{"http:a.b", "http:a_b"}, {"http:a:b", "http:a_b"}, {"discord:1", "discord:2"},
		{"my_kind:x", "my:kind_x"}, {"http:" + strings.Repeat("x", 40), "http:" + strings.Repeat("x", 41)},
		{"http:+", "http:.2b"}, {"http:é", "http:.c3.a9"},
	} {
		f.Add(pair[0], pair[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := rtsandbox.ChannelKey(a), rtsandbox.ChannelKey(b)
		for _, k := range []rtsandbox.ChannelKey{ka, kb} {
			if checkChannel(k) != nil {
				return
			}
		}
		sa, sb := Segment(ka), Segment(kb)
		if a != b && sa == sb {
			t.Fatalf("%q and %q share the segment %q", a, b, sa)
		}
		for _, k := range []rtsandbox.ChannelKey{ka, kb} {
			seg := Segment(k)
			if !segmentName.MatchString(seg) || !validEntry(seg) {
				t.Fatalf("Segment(%q) = %q: not a segment name", k, seg)
			}
			if key, ok := unescapeSegment(seg); ok && key != string(k) {
				t.Fatalf("Segment(%q) = %q decodes to %q", k, seg, key)
			} else if !ok && !strings.Contains(seg, "+") {
				t.Fatalf("Segment(%q) = %q neither decodes nor is hashed", k, seg)
			}
		}
	})
}

// A channel whose directory an earlier version made under its lossy name
// (with the .channel-key record naming it) has it moved to its segment at
// its first use, files, record and all, once: the container that bound
// the earlier paths is removed first, the operator log says so, and the
// next turn runs there. The key that shared the lossy name then gets a
// directory of its own instead of being refused forever.
func TestSegmentMigration(t *testing.T) {
	f := newFixture(t)
	const ch, twin = "http:a.b", "http:a_b"
	old := legacyRoot(t, f, ch)
	writeFile(t, filepath.Join(old, workspaceName, sessionsName, "talk.jsonl"), 10)
	f.w.takeCalls()
	if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
		t.Fatalf("turn = %v", err)
	}
	root := filepath.Join(f.party, Segment(ch))
	if data, err := os.ReadFile(filepath.Join(root, workspaceName, sessionsName, "talk.jsonl")); err != nil || len(data) != 10 {
		t.Errorf("the conversation did not move: %v", err)
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("the earlier directory stayed: %v", err)
	}
	if calls := f.w.takeCalls(); len(calls) == 0 || calls[0] != "remove:"+f.rt.name(ch) {
		t.Errorf("calls = %v; want the container removed before the move", calls)
	}
	recs := f.log.find("session channel directory migrated")
	if len(recs) != 1 || recs[0].attrs["from"] != old || recs[0].attrs["to"] != root {
		t.Errorf("records = %+v", recs)
	}
	if _, err := f.turnIn(context.Background(), twin, "a"); err != nil {
		t.Fatalf("the twin key's turn = %v; want a directory of its own", err)
	}
	if _, err := f.turnIn(context.Background(), ch, "b"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.log.find("session channel directory migrated")); n != 1 {
		t.Errorf("%d migrations; want one", n)
	}
}

// legacyRoot makes channel's directory as an earlier version did: under
// its lossy name, with its key record and workspace.
func legacyRoot(t *testing.T, f *fixture, channel rtsandbox.ChannelKey) string {
	t.Helper()
	old := filepath.Join(f.party, legacySegment(channel))
	if err := os.MkdirAll(filepath.Join(old, workspaceName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, keyFile), []byte(channel), 0o600); err != nil {
		t.Fatal(err)
	}
	return old
}

// [SEC] A link at the earlier name is never followed or moved: the
// channel is refused (ErrMigration) with an operator line, and what the
// link points at is untouched.
func TestSecSegmentMigrationLinkRefused(t *testing.T) {
	f := newFixture(t)
	const ch = "http:a.b"
	outside := shortDir(t)
	if err := os.WriteFile(filepath.Join(outside, keyFile), []byte(ch), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(f.party, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.party, legacySegment(ch))); err != nil {
		t.Fatal(err)
	}
	_, err := f.turnIn(context.Background(), ch, "a")
	if !errors.Is(err, ErrMigration) {
		t.Fatalf("turn = %v; want ErrMigration", err)
	}
	if recs := f.log.find("session channel directory not migrated: its earlier name is a link"); len(recs) != 1 {
		t.Errorf("records = %+v", recs)
	}
	if _, err := os.Lstat(filepath.Join(f.party, Segment(ch))); !os.IsNotExist(err) {
		t.Errorf("something was made at the new name: %v", err)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("the link's target was touched: %v", entries)
	}
}

// When both the earlier and the new directory exist, nothing moves: the
// channel keeps its new directory, the earlier one stays for the
// operator, and the operator log says so once. An earlier directory of
// another channel (its record names that one) is never moved.
func TestSegmentMigrationConflictRefused(t *testing.T) {
	f := newFixture(t)
	const ch = "http:a.b"
	old := legacyRoot(t, f, ch)
	if _, err := f.rt.s.channelRoot("http:a_b"); err != nil { // the twin's own directory
		t.Fatal(err)
	}
	newRoot := filepath.Join(f.party, Segment(ch))
	if err := os.MkdirAll(newRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(newRoot, keyFile), []byte(ch), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
			t.Fatalf("turn = %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(old, keyFile)); err != nil {
		t.Errorf("the earlier directory went: %v", err)
	}
	if _, err := os.Stat(filepath.Join(newRoot, workspaceName, sessionsName)); err != nil {
		t.Errorf("the turn did not run in the new directory: %v", err)
	}
	recs := f.log.find("session channel directory not migrated: its new name exists; the earlier directory is left for the operator")
	if len(recs) != 1 || recs[0].attrs["from"] != old {
		t.Errorf("records = %+v; want one naming %s", recs, old)
	}

	other := newFixture(t)
	foreign := legacyRoot(t, other, "http:x_y") // http_x_y, whose record names http:x_y
	if _, err := other.turnIn(context.Background(), "http:x.y", "a"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(foreign, keyFile))
	if diff := cmp.Diff("http:x_y", string(got)); err != nil || diff != "" {
		t.Errorf("another channel's directory changed (%v):\n%s", err, diff)
	}
	if n := len(other.log.find("session channel directory migrated")); n != 0 {
		t.Errorf("%d migrations of another channel's directory", n)
	}
}
