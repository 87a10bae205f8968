package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/wire"
)

// completionWithUsage is an OpenAI chat-completions answer with its usage
// fields, as the upstream sends them.
const completionWithUsage = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"test-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":120,"completion_tokens":17,"total_tokens":137}}`

func openLedger(t *testing.T, cfg budget.Config) *budget.Ledger {
	t.Helper()
	dir := filepath.Join(shortDir(t), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := budget.Open(filepath.Join(dir, budget.FileName), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func usage(t *testing.T, l *budget.Ledger, scope string) map[budget.Kind]budget.Entry {
	t.Helper()
	es, err := l.Usage(context.Background(), l.Today(), scope)
	if err != nil {
		t.Fatal(err)
	}
	out := map[budget.Kind]budget.Entry{}
	for _, e := range es {
		out[e.Kind] = e
	}
	return out
}

// A model call is settled with the upstream's usage.total_tokens, and one
// call, in all three scopes; nothing stays reserved.
func TestModelCallSettlesUpstreamUsage(t *testing.T) {
	l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Tokens: 100000}})
	f := newFixture(t, jsonReply(completionWithUsage), func(c *broker.Config) { c.Budget = l })
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[{"role":"user","content":"hello"}]}`), 200, "")
	for _, scope := range budget.Scopes(testChannel, guest.PrincipalID) {
		u := usage(t, l, scope)
		if u[budget.Tokens].Used != 137 || u[budget.Calls].Used != 1 || u[budget.Tokens].Reserved != 0 || u[budget.Calls].Reserved != 0 {
			t.Errorf("%s usage = %+v; want 137 tokens and 1 call used, none reserved", scope, u)
		}
	}
	if f.turn.OverBudget() {
		t.Error("OverBudget() = true after a call within budget")
	}
}

// An answer without usage is settled with the reservation's estimate.
func TestModelCallWithoutUsageSettlesEstimate(t *testing.T) {
	l := openLedger(t, budget.Config{})
	f := newFixture(t, jsonReply(`{"choices":[]}`), func(c *broker.Config) {
		c.Budget = l
		c.MaxOutputTokens = 1000
	})
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 200, "")
	got := usage(t, l, budget.Installation)[budget.Tokens].Used
	if got <= 1000 || got > 1100 {
		t.Errorf("tokens used = %d; want the estimate, 1000 output tokens plus a few for the request", got)
	}
}

// A spent daily call budget answers 429 daily_budget before the upstream
// is reached, and marks the turn.
func TestDailyCallBudgetRefuses(t *testing.T) {
	l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Calls: 2}})
	f := newFixture(t, jsonReply(completionWithUsage), func(c *broker.Config) { c.Budget = l })
	for range 2 {
		wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 200, "")
	}
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 429, "daily budget exhausted")
	if n := len(f.model.requests()); n != 2 {
		t.Errorf("upstream called %d times; want 2", n)
	}
	if !f.turn.OverBudget() {
		t.Error("OverBudget() = false after a daily-budget refusal")
	}
}

// A token budget too small for the call's estimate refuses it before the
// upstream is reached; the call itself still counts.
func TestDailyTokenBudgetRefuses(t *testing.T) {
	l := openLedger(t, budget.Config{PerChannel: budget.Limits{Tokens: 500}})
	f := newFixture(t, jsonReply(completionWithUsage), func(c *broker.Config) { c.Budget = l })
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 429, "daily budget exhausted")
	if n := len(f.model.requests()); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
	u := usage(t, l, budget.ChannelScope(testChannel))
	if u[budget.Tokens].Used != 0 || u[budget.Calls].Used != 1 {
		t.Errorf("channel usage = %+v; want 0 tokens, 1 call", u)
	}
}

// The usage the ledger is settled with is the one a decoder of the whole
// answer reads, whether the reflection scan found it (a large answer, the
// member anywhere at the top level, any case) or, unsure of it, left it
// to a decode of the whole answer (an escaped or repeated key).
func TestModelCallUsageFromTheScan(t *testing.T) {
	big := string(answercorpus.Answer(answercorpus.Markdown, 300<<10)) // its usage: 357 tokens in all
	repeated := big[:len(big)-1] + `,"usage":{"prompt_tokens":1000,"completion_tokens":234}}`
	tests := []struct {
		name   string
		answer string
		want   int64 // 0: the estimate
	}{
		{"large-answer", big, 357},
		{"large-repeated", repeated, 357}, // decoded whole: the members merge, total_tokens stays
		{"first-member", `{"usage":{"total_tokens":55},"choices":[]}`, 55},
		{"case-folded", `{"choices":[],"Usage":{"total_tokens":56}}`, 56},
		{"nested-only", `{"choices":[{"usage":{"total_tokens":57}}]}`, 0},
		{"escaped-key", `{"choices":[],"\u0075sage":{"total_tokens":58}}`, 58},
		{"repeated-key", `{"usage":{"prompt_tokens":5},"usage":{"completion_tokens":4}}`, 9},
		{"null", `{"choices":[],"usage":null}`, 0},
		{"wrong-type", `{"choices":[],"usage":{"total_tokens":"x"}}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := openLedger(t, budget.Config{})
			f := newFixture(t, jsonReply(tt.answer), func(c *broker.Config) {
				c.Budget = l
				c.MaxOutputTokens = 1000
			})
			wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 200, "")
			got := usage(t, l, budget.Installation)[budget.Tokens].Used
			if tt.want == 0 && (got <= 1000 || got > 1100) || tt.want != 0 && got != tt.want {
				t.Errorf("tokens used = %d; want %d (0: the estimate)", got, tt.want)
			}
		})
	}
}
