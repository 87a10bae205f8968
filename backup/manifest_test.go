package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	sum0 = "0000000000000000000000000000000000000000000000000000000000000000"
	seg  = "http_lobby"
)

// manifestOf is a manifest's JSON with the given files.
func manifestOf(files ...string) string {
	return `{"format":"rtsandbox-backup","version":1,"created":"2026-12-04T10:00:00Z","files":[` + strings.Join(files, ",") + `]}`
}

func entry(path string) string {
	return fmt.Sprintf(`{"path":%q,"size":1,"sha256":%q}`, path, sum0)
}

var (
	keyEntry  = entry("party/" + seg + "/.channel-key")
	convEntry = entry("party/" + seg + "/workspace/sessions/a.jsonl")
)

// manifestCases are ParseManifest's table; they seed FuzzParseManifest.
var manifestCases = []struct {
	name, in string
	want     string // "" accepted, else a part of the error
}{
	{"empty backup", manifestOf(), ""},
	{"state and a channel", manifestOf(entry("state/memory.db"), entry("state/channels.json"), keyEntry, convEntry,
		entry("party/"+seg+"/workspace/sessions/archive/2026-12-04T10-00-00Z/b.jsonl")), ""},
	{"parent escape", manifestOf(entry("../x")), "not a relative path"},
	{"escape inside", manifestOf(keyEntry, entry("party/"+seg+"/workspace/sessions/../../../../etc/passwd")), "not a relative path"},
	{"absolute", manifestOf(entry("/etc/passwd")), "not a relative path"},
	{"dot", manifestOf(entry("state/./memory.db")), "not a relative path"},
	{"backslash", manifestOf(entry(`state\memory.db`)), "not a relative path"},
	{"control", manifestOf(entry("state/memory.db\n")), "not a relative path"},
	{"empty component", manifestOf(entry("state//memory.db")), "not a relative path"},
	{"unknown state file", manifestOf(entry("state/inflight.json")), "not a state file"},
	{"outside sessions", manifestOf(keyEntry, entry("party/"+seg+"/workspace/attachments/x")), "not a state file"},
	{"workspace image", manifestOf(keyEntry, entry("party/"+seg+"/workspace.img")), "not a state file"},
	{"sessions itself", manifestOf(keyEntry, entry("party/"+seg+"/workspace/sessions")), "not a state file"},
	{"no key record", manifestOf(convEntry), "without its .channel-key"},
	{"twice", manifestOf(entry("state/memory.db"), entry("state/memory.db")), "listed twice"},
	{"file and directory", manifestOf(keyEntry, entry("party/"+seg+"/workspace/sessions/a"), entry("party/"+seg+"/workspace/sessions/a/b")), "both a file and a directory"},
	{"too deep", manifestOf(keyEntry, entry("party/"+seg+"/workspace/sessions/"+strings.Repeat("d/", MaxDepth)+"f")), "deeper than"},
	{"too long", manifestOf(keyEntry, entry("party/"+seg+"/workspace/sessions/"+strings.Repeat("d", MaxPathBytes))), "more than 1024"},
	{"negative size", manifestOf(`{"path":"state/memory.db","size":-1,"sha256":"` + sum0 + `"}`), "size -1"},
	{"huge size", manifestOf(`{"path":"state/memory.db","size":1099511627777,"sha256":"` + sum0 + `"}`), "size 1099511627777"},
	{"long key record", manifestOf(`{"path":"party/` + seg + `/.channel-key","size":100000,"sha256":"` + sum0 + `"}`), "longer than a channel key"},
	{"short sha", manifestOf(`{"path":"state/memory.db","size":1,"sha256":"00"}`), "64 lower-case hex"},
	{"upper-case sha", manifestOf(`{"path":"state/memory.db","size":1,"sha256":"` + strings.ToUpper(strings.Repeat("ab", 32)) + `"}`), "64 lower-case hex"},
	{"not hex", manifestOf(`{"path":"state/memory.db","size":1,"sha256":"` + strings.Repeat("zz", 32) + `"}`), "64 lower-case hex"},
	{"other format", strings.Replace(manifestOf(), "rtsandbox-backup", "tar", 1), "format"},
	{"other version", strings.Replace(manifestOf(), `"version":1`, `"version":2`, 1), "version 2"},
	{"no time", strings.Replace(manifestOf(), `"created":"2026-12-04T10:00:00Z",`, "", 1), "no creation time"},
	{"unknown member", strings.Replace(manifestOf(), `"version":1`, `"version":1,"mode":"0777"`, 1), "unknown field"},
	{"unknown file member", manifestOf(`{"path":"state/memory.db","size":1,"sha256":"` + sum0 + `","mode":511}`), "unknown field"},
	{"data after", manifestOf() + "{}", "data after"},
	{"deep nesting", strings.Replace(manifestOf(), `"files":[]`, `"files":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000), 1), "backup manifest refused"},
	{"not an object", `[]`, "backup manifest refused"},
	{"not json", `{`, "backup manifest refused"},
}

// TestParseManifest: every rule of ParseManifest refuses with ErrManifest
// and names itself; the well-formed manifests are accepted.
func TestParseManifest(t *testing.T) {
	for _, tc := range manifestCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.in))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseManifest = %v; want it accepted", err)
			case tc.want != "" && (!errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ParseManifest = %v; want ErrManifest naming %q", err, tc.want)
			}
		})
	}
}

// TestParseManifestBounds: a manifest over MaxManifestBytes or with more
// than MaxFiles files is refused before its files are looked at.
func TestParseManifestBounds(t *testing.T) {
	big := make([]byte, MaxManifestBytes+1)
	if _, err := ParseManifest(big); !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "bytes, more than") {
		t.Errorf("ParseManifest(%d bytes) = %v; want the size refused", len(big), err)
	}
	// The count is checked before any file (check, which ParseManifest
	// calls on what it decoded).
	m := Manifest{Format: Format, Version: Version, Created: time.Unix(1, 0), Files: make([]File, MaxFiles+1)}
	if err := m.check(); !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "files, more than") {
		t.Errorf("check(%d files) = %v; want the count refused", len(m.Files), err)
	}
}

// FuzzParseManifest: ParseManifest never panics, and what it accepts
// keeps every rule: marshalled and parsed again it is the same manifest,
// and each path is one of the places a restore may write.
func FuzzParseManifest(f *testing.F) {
	for _, tc := range manifestCases {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error %v does not wrap ErrManifest", err)
			}
			return
		}
		for _, file := range m.Files {
			if err := checkPath(file.Path); err != nil {
				t.Fatalf("accepted path %q: %v", file.Path, err)
			}
			if strings.Contains(file.Path, "..") && strings.Contains("/"+file.Path+"/", "/../") {
				t.Fatalf("accepted path %q escapes", file.Path)
			}
		}
		again, err := m.marshal()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("re-parse of an accepted manifest: %v\n%s", err, again)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(again, &raw) != nil || len(raw) != 4 {
			t.Fatalf("marshalled manifest has members %v", raw)
		}
	})
}
