// Package effort judges, on the host, how hard a session turn should
// think (docs/session.md, "Effort judge"): low, medium, high or xhigh. The level
// rides in the turn and the broker caps the turn's upstream thinking
// budget or effort by it, whatever the worker asks, so the judge is the
// host's cost control, never the guest's.
//
// A Judge sees the guest's text and the level it judged for the channel's
// previous turn (a hint: "" for the first turn). Heuristic is the default.
package effort

import (
	"context"
	"regexp"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// The levels, lowest first (rtsandbox.ThinkingBudget gives their budgets).
const (
	Low    = "low"
	Medium = "medium"
	High   = "high"
	XHigh  = "xhigh"
)

var levels = [...]string{Low, Medium, High, XHigh}

// Judge returns the thinking level of a turn: one of Low, Medium, High,
// XHigh. previous is the level judged for the channel's previous turn, or
// "". An error fails the turn.
type Judge interface {
	Judge(ctx context.Context, text, previous string) (string, error)
}

// JudgeFunc adapts a function to Judge.
type JudgeFunc func(ctx context.Context, text, previous string) (string, error)

// Judge calls f.
func (f JudgeFunc) Judge(ctx context.Context, text, previous string) (string, error) {
	return f(ctx, text, previous)
}

// Fixed is a Judge that always answers its level (a profile without
// judging, tests).
type Fixed string

// Judge returns f.
func (f Fixed) Judge(context.Context, string, string) (string, error) { return string(f), nil }

// Heuristic is the default Judge. It scores the text and maps the score
// to a level:
//
//   - length in UTF-16 units: under 200 scores 0, under 1,000 scores 1,
//     under 4,000 scores 2, longer scores 3;
//   - code (a ``` fence, or at least two lines that look like code) adds 1;
//   - several questions (two or more "?") add 1;
//   - words that ask for depth ("why", "explain", "prove", "design",
//     "debug", "step by step", "compare", "analyse/analyze") add 1.
//
// The score picks low (0), medium (1), high (2) or xhigh (3 and more).
// The previous level is a hint that a short follow-up ("go on", "and
// then?") continues a hard conversation: the result is never more than one
// level below it.
type Heuristic struct{}

var (
	codeLineRE = regexp.MustCompile(`(?m)^\s*(?:func |def |class |import |package |#include|SELECT |for \(|if \(|return |const |let |var ).*$|[;{}]\s*$`)
	depthRE    = regexp.MustCompile(`(?i)\b(?:why|explain|prove|proof|design|debug|step by step|compare|analy[sz]e|trade-?offs?|architecture)\b`)
)

// Judge implements Judge; it never fails and ignores ctx.
func (Heuristic) Judge(_ context.Context, text, previous string) (string, error) {
	score := 0
	switch n := rtsandbox.UTF16Len(text); {
	case n >= 4000:
		score = 3
	case n >= 1000:
		score = 2
	case n >= 200:
		score = 1
	}
	if strings.Contains(text, "```") || len(codeLineRE.FindAllStringIndex(text, 2)) >= 2 {
		score++
	}
	if strings.Count(text, "?") >= 2 {
		score++
	}
	if depthRE.MatchString(text) {
		score++
	}
	level := min(score, len(levels)-1)
	if p := rank(previous); p > 0 {
		level = max(level, p-1)
	}
	return levels[level], nil
}

// rank is the index of level in levels; -1 for anything else.
func rank(level string) int {
	for i, l := range levels {
		if l == level {
			return i
		}
	}
	return -1
}
