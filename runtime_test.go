package rtsandbox

import (
	"strings"
	"testing"
)

// TestSealedText: a runtime that takes no attachments tells the model of
// the message's own files only, whether the surface counted them or
// handed them over; the replied-to message's files never count.
func TestSealedText(t *testing.T) {
	own := Attachment{Name: "a.png", URL: "https://cdn.example/a.png"}
	ref := Attachment{Name: "b.png", URL: "https://cdn.example/b.png", FromReference: true}
	notice := "look\n" + AttachmentsUnsupportedText
	tests := []struct {
		name string
		in   TurnInput
		want string
	}{
		{"own-file", TurnInput{Text: "look", Attachments: []Attachment{own}, Attached: 1}, notice},
		{"own-file-uncounted-by-surface", TurnInput{Text: "look", Attachments: []Attachment{own}}, notice},
		{"own-and-reference-files", TurnInput{Text: "look", Attachments: []Attachment{own, ref}, Attached: 1}, notice},
		{"counted-without-files", TurnInput{Text: "look", Attached: 2}, notice},
		{"reference-file-only", TurnInput{Text: "look", Attachments: []Attachment{ref}}, "look"},
		{"none", TurnInput{Text: "look"}, "look"},
		{"files-only", TurnInput{Attached: 1}, "\n" + AttachmentsUnsupportedText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.SealedText(); got != tt.want {
				t.Errorf("SealedText() = %q; want %q", got, tt.want)
			}
		})
	}
}

// The enabled texts of both modes begin with EnabledPrefix, which the
// HTTP API reads as "enabled"; the disabled text does not.
func TestEnabledTextsSharePrefix(t *testing.T) {
	for _, s := range []string{EnabledText, EnabledSessionText, EnabledTextFor(ModeSession), EnabledTextFor(ModeSealed)} {
		if !strings.HasPrefix(s, EnabledPrefix) {
			t.Errorf("%q does not begin with %q", s, EnabledPrefix)
		}
	}
	if strings.HasPrefix(DisabledText, EnabledPrefix) || EnabledTextFor(ModeSession) == EnabledText {
		t.Error("the texts do not tell the modes or the states apart")
	}
}
