package rtsandbox_test

import (
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
)

// TestReplyValidateTextLimit: a reply's text may have MaxReplyText UTF-16
// units and no more, counted as UTF-16 (an astral rune is two).
func TestReplyValidateTextLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		ok   bool
	}{
		{"empty", "", true},
		{"at-limit", strings.Repeat("a", rtsandbox.MaxReplyText), true},
		{"over-limit", strings.Repeat("a", rtsandbox.MaxReplyText+1), false},
		{"astral-over-limit", strings.Repeat("\U0001F600", rtsandbox.MaxReplyText/2) + "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := (rtsandbox.Reply{OK: true, Text: tc.text}).Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v; want ok %v", err, tc.ok)
			}
		})
	}
}
