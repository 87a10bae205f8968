package worker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

func TestLoadHistory(t *testing.T) {
	if got := loadHistory([]rtsandbox.HistoryEntry{}, false); len(got) != 0 {
		t.Fatalf("loadHistory(empty) = %v; want empty", got)
	}
	passed := []rtsandbox.HistoryEntry{
		{Role: "user", Content: strings.Repeat("h", 100000)},
		{Role: "assistant", Content: "short"},
	}
	got := loadHistory(passed, false)
	if len(got) != 2 {
		t.Fatalf("loadHistory() = %v; want 2 messages", got)
	}
	checkTruncated(t, strings.Repeat("h", 100000), budgetHistory, got[0].Content)
	if diff := cmp.Diff(message{Role: "assistant", Content: "short"}, got[1]); diff != "" {
		t.Errorf("message 1 = %+v", got[1])
	}
	if passed[0].Content != strings.Repeat("h", 100000) {
		t.Errorf("loadHistory changed the turn's history")
	}
	if got := loadHistory(passed, true); got != nil {
		t.Errorf("loadHistory(reset) = %v; want nothing", got)
	}
}

// The returned history is the loaded one plus this exchange, each message
// truncated to the budget, keeping the last 20. (Formerly
// TestSaveHistoryKeepsLast20, which read history.json back.)
func TestNextHistoryKeepsLast20(t *testing.T) {
	var history []message
	for i := range 19 {
		history = append(history, message{Role: []string{"user", "assistant"}[i%2], Content: fmt.Sprint(i)})
	}
	user := `{"speaker":{"id":"a","name":"A"},"message":"hi"}`
	got := nextHistory(history, user, strings.Repeat("r", 9000))
	if len(got) != rtsandbox.MaxHistory || got[0].Content != "1" {
		t.Fatalf("nextHistory has %d messages starting %q; want the last 20 starting at 1", len(got), got[0].Content)
	}
	if diff := cmp.Diff(rtsandbox.HistoryEntry{Role: "user", Content: user}, got[18]); diff != "" {
		t.Errorf("user message (-want +got):\n%s", diff)
	}
	if got[19].Role != "assistant" {
		t.Errorf("last message role = %q; want assistant", got[19].Role)
	}
	checkTruncated(t, strings.Repeat("r", 9000), budgetHistory, got[19].Content)
	if history[0].Content != "0" || len(history) != 19 {
		t.Errorf("nextHistory changed the loaded history")
	}

	long := strings.Repeat("u", 9000)
	got = nextHistory(nil, long, "ok")
	if len(got) != 2 {
		t.Fatalf("nextHistory(no history) = %d messages; want 2", len(got))
	}
	checkTruncated(t, long, budgetHistory, got[0].Content)
}

// The wire form is never null, even for no history (a reset).
func TestHistoryEntriesNeverNil(t *testing.T) {
	if got := historyEntries(nil); got == nil || len(got) != 0 {
		t.Errorf("historyEntries(nil) = %#v; want an empty, non-nil list", got)
	}
	in := []message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}
	want := []rtsandbox.HistoryEntry{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}}
	if diff := cmp.Diff(want, historyEntries(in)); diff != "" {
		t.Errorf("historyEntries (-want +got):\n%s", diff)
	}
}
