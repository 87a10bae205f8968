package effort_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/effort"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestHeuristic(t *testing.T) {
	code := "```go\nfunc main() {\n}\n```"
	tests := []struct {
		name, text, previous, want string
	}{
		{"short greeting", "hi there", "", effort.Low},
		{"empty", "", "", effort.Low},
		{"one question", "what time is it?", "", effort.Low},
		{"two questions", "what is it? and where?", "", effort.Medium},
		{"depth word", "why does the sky look blue", "", effort.Medium},
		{"code fence", "fix this " + code, "", effort.Medium},
		{"code lines without fence", "x := 1;\ny := 2;\n", "", effort.Medium},
		{"one code-like line is not code", "a;", "", effort.Low},
		{"medium length", strings.Repeat("a", 200), "", effort.Medium},
		{"long", strings.Repeat("word ", 200), "", effort.High},
		{"very long", strings.Repeat("word ", 800), "", effort.XHigh},
		{"long, code, questions, depth", strings.Repeat("a", 1000) + code + " why? how?", "", effort.XHigh},
		{"length counts UTF-16 units", strings.Repeat("😀", 100), "", effort.Medium},
		// The previous level is a hint: a short follow-up stays within one
		// level of it, and never raises a message above what it scores.
		{"follow-up after xhigh", "go on", effort.XHigh, effort.High},
		{"follow-up after high", "go on", effort.High, effort.Medium},
		{"follow-up after medium", "go on", effort.Medium, effort.Low},
		{"follow-up after low", "go on", effort.Low, effort.Low},
		{"unknown previous ignored", "go on", "max", effort.Low},
		{"hard text after low", strings.Repeat("word ", 800), effort.Low, effort.XHigh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := effort.Heuristic{}.Judge(context.Background(), tt.text, tt.previous)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("level (-want +got):\n%s", diff)
			}
			if !wire.ValidThinking(got) {
				t.Errorf("%q is not a thinking level", got)
			}
		})
	}
}

func TestFixedAndFunc(t *testing.T) {
	got, _ := effort.Fixed(effort.High).Judge(context.Background(), "x", "")
	if got != effort.High {
		t.Errorf("Fixed = %q", got)
	}
	f := effort.JudgeFunc(func(_ context.Context, text, previous string) (string, error) { return previous, nil })
	if got, _ := f.Judge(context.Background(), "x", effort.Medium); got != effort.Medium {
		t.Errorf("JudgeFunc = %q", got)
	}
}

// FuzzHeuristic: any guest text gets a valid level, whatever the hint.
func FuzzHeuristic(f *testing.F) {
	f.Add("hi", "")
	f.Add("```\nfunc x() {\n}\n``` why?", "xhigh")
	f.Fuzz(func(t *testing.T, text, previous string) {
		got, err := effort.Heuristic{}.Judge(context.Background(), text, previous)
		if err != nil || !wire.ValidThinking(got) {
			t.Fatalf("Judge = %q, %v", got, err)
		}
	})
}
