package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadHistory(t *testing.T) {
	ws := t.TempDir()
	if got, err := loadHistory(ws, false); err != nil || len(got) != 0 {
		t.Fatalf("loadHistory(no file) = %v, %v; want empty", got, err)
	}
	writeJSON(t, historyFile(ws), []any{
		map[string]any{"role": "user", "content": strings.Repeat("h", 100000), "extra": 1},
		map[string]any{"role": "assistant", "content": "short"},
	})
	got, err := loadHistory(ws, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("loadHistory() = %v, %v", got, err)
	}
	checkTruncated(t, strings.Repeat("h", 100000), budgetHistory, got[0].Content)
	if diff := cmp.Diff(message{Role: "assistant", Content: "short"}, got[1]); diff != "" {
		t.Errorf("entry 1 = %+v", got[1])
	}
	if got, err := loadHistory(ws, true); err != nil || got != nil {
		t.Errorf("loadHistory(reset) = %v, %v; want nothing read", got, err)
	}
}

func TestSaveHistoryKeepsLast20(t *testing.T) {
	ws := t.TempDir()
	var history []message
	for i := range 19 {
		history = append(history, message{Role: []string{"user", "assistant"}[i%2], Content: fmt.Sprint(i)})
	}
	if err := saveHistory(ws, history, `{"speaker":{"id":"a","name":"A"},"message":"hi"}`, strings.Repeat("r", 9000)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(historyFile(ws))
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != maxHistory || got[0]["content"] != "1" {
		t.Fatalf("saved %d entries starting %q; want the last 20 starting at 1", len(got), got[0]["content"])
	}
	if diff := cmp.Diff(map[string]string{"role": "user", "content": `{"speaker":{"id":"a","name":"A"},"message":"hi"}`}, got[18]); diff != "" {
		t.Errorf("user entry (-want +got):\n%s", diff)
	}
	checkTruncated(t, strings.Repeat("r", 9000), budgetHistory, got[19]["content"])
	if fi, _ := os.Stat(historyFile(ws)); fi.Mode().Perm() != 0o600 {
		t.Errorf("history.json mode = %v; want 0600", fi.Mode().Perm())
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	outside := filepath.Join(dir, "outside")
	os.WriteFile(outside, []byte("keep"), 0o644)
	// A leftover tmp name that is a symlink must not be written through.
	if err := os.Symlink(outside, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "keep" {
		t.Errorf("symlink target = %q; want untouched", got)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("file = %q; want new", got)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want regular 0600", fi.Mode(), err)
	}
	if _, err := os.Lstat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("tmp left behind: %v", err)
	}
}
