package worker

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/jsonjs"
)

func TestPromptText(t *testing.T) {
	markerSize := jsonjs.StringSize(truncationMarker)
	tests := []struct {
		name      string
		text      string
		budget    int
		unchanged bool
	}{
		{"fits", "hello", 7, true},
		{"one-over", "hello", 6, false},
		{"empty", "", 2, true},
		{"escapes-count", strings.Repeat("\n", 10), 22, true},
		{"escapes-over", strings.Repeat("\n", 10), 21, false},
		{"controls-six-bytes", strings.Repeat("\x01", 10), 62, true},
		{"html-not-escaped", strings.Repeat("<&>", 10), 32, true},
		{"line-separator-raw", strings.Repeat("\u2028", 10), 32, true},
		{"ascii-long", strings.Repeat("a", 10000), 4096, false},
		{"cjk-long", strings.Repeat("\u4e01", 20000), 48 * 1024, false},
		{"emoji-long", strings.Repeat("😀", 3000), 4096, false},
		{"mixed-escapes", strings.Repeat("a\"b\\c\td", 2000), 8192, false},
		{"marker-alone-too-big", strings.Repeat("a", 100), markerSize - 1, false},
		{"marker-exactly", strings.Repeat("a", 100), markerSize, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := promptText(tt.text, tt.budget)
			if tt.unchanged {
				if got != tt.text {
					t.Errorf("promptText(%.20q, %d) = %.20q; want unchanged", tt.text, tt.budget, got)
				}
				return
			}
			checkTruncated(t, tt.text, tt.budget, got)
		})
	}
}

// checkTruncated asserts got is the longest rune prefix of text that fits
// budget with the marker, or the marker alone when nothing fits.
func checkTruncated(t *testing.T, text string, budget int, got string) {
	t.Helper()
	prefix, ok := strings.CutSuffix(got, truncationMarker)
	if !ok || !strings.HasPrefix(text, prefix) || !utf8.ValidString(prefix) {
		t.Fatalf("promptText(%.20q, %d) = %.40q; want a valid prefix plus the marker", text, budget, got)
	}
	if prefix == "" {
		return
	}
	if n := jsonjs.StringSize(got); n > budget {
		t.Errorf("promptText(%.20q, %d) is %d bytes of JSON; want ≤ %d", text, budget, n, budget)
	}
	_, size := utf8.DecodeRuneInString(text[len(prefix):])
	if longer := text[:len(prefix)+size] + truncationMarker; jsonjs.StringSize(longer) <= budget {
		t.Errorf("promptText(%.20q, %d) kept %d bytes; one more rune still fits", text, budget, len(prefix))
	}
}

func TestLocalTime(t *testing.T) {
	at := time.Date(2026, 1, 2, 0, 4, 5, 0, time.UTC)
	tests := []struct {
		name, zone, want string
	}{
		{"utc-midnight", "UTC", "1/2/2026, 12:04:05 AM"},
		{"new-york-previous-day", "America/New_York", "1/1/2026, 7:04:05 PM"},
		{"taipei-morning", "Asia/Taipei", "1/2/2026, 8:04:05 AM"},
		{"kolkata-half-hour", "Asia/Kolkata", "1/2/2026, 5:34:05 AM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := localTime(at, tt.zone)
			if err != nil || got != tt.want {
				t.Errorf("localTime(%v, %q) = %q, %v; want %q", at, tt.zone, got, err, tt.want)
			}
		})
	}
	for _, zone := range []string{"", "Local", "Mars/Olympus", "../etc/passwd", "/etc/localtime"} {
		if got, err := localTime(at, zone); err == nil {
			t.Errorf("localTime(%q) = %q; want error", zone, got)
		}
	}
}

func TestSystemPrompt(t *testing.T) {
	got := systemPrompt(strings.Repeat("p", 9000), "1/2/2026, 3:04:05 PM", `[{"key":"drink","text":"Tea"}]`, "[]")
	lines := strings.Split(got, "\n")
	// The truncated operator prompt adds one line (the marker's newline).
	if len(lines) != 6 || !strings.HasPrefix(lines[1], "[Text truncated") {
		t.Fatalf("systemPrompt lines = %d; want 6 with the operator prompt truncated", len(lines))
	}
	if lines[2] != "Current time: 1/2/2026, 3:04:05 PM." {
		t.Errorf("time line = %q", lines[2])
	}
	if !strings.HasSuffix(lines[4], `[{"key":"drink","text":"Tea"}]`) || !strings.HasSuffix(lines[5], "[]") {
		t.Errorf("preview lines = %q, %q", lines[4], lines[5])
	}
}
