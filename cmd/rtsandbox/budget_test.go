package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// TestServeDailyBudget drives real sealed turns through serve with a
// per-speaker limit of 3 calls a day: the fourth turn gets the budget
// text without a container, the owner's usage API shows the spend
// (tokens from the model's usage fields), and after a restart on the same
// state dir the usage is still there and the next turn is still refused.
func TestServeDailyBudget(t *testing.T) {
	tag, _ := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Content: "Within budget.",
				Usage: &fakemodel.Usage{PromptTokens: 90, CompletionTokens: 10, TotalTokens: 100}}
		}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, "budgets:\n  per_speaker: {calls: 3}\n  per_channel: {tokens: 1000000}\n")

	s := startServe(t, addr, "--config", cfg, "--drain", "20s")
	for i := range 3 {
		if got := chunksOf(s.say(t, "http:lobby", "Hello")); len(got) != 1 || got[0] != "Within budget." {
			t.Fatalf("turn %d reply = %q; want the model's text\n%s", i+1, got, s.out.String())
		}
	}
	if got := chunksOf(s.say(t, "http:lobby", "Hello")); len(got) != 1 || got[0] != rtsandbox.BudgetText {
		t.Errorf("fourth turn reply = %q; want the budget text", got)
	}
	if n := len(model.Requests()); n != 3 {
		t.Errorf("model requests = %d; want 3", n)
	}
	want := usageWant{calls: 3, tokens: 300}
	checkUsage(t, s, want)
	if code, body := s.call(t, "GET", "/api/v1/channels/http:lobby/sandbox", serveOwnerToken, ""); code != 200 ||
		!strings.Contains(body, "this channel 3 calls, 300/1000000 tokens") {
		t.Errorf("owner status = %d %s; want today's usage", code, body)
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}

	s = startServe(t, addr, "--config", cfg, "--drain", "20s")
	checkUsage(t, s, want)
	if got := chunksOf(s.say(t, "http:lobby", "Hello")); len(got) != 1 || got[0] != rtsandbox.BudgetText {
		t.Errorf("turn after restart = %q; want the budget text", got)
	}
	if n := len(model.Requests()); n != 3 {
		t.Errorf("model requests after restart = %d; want 3", n)
	}
}

type usageWant struct{ calls, tokens int64 }

func checkUsage(t *testing.T, s *server, want usageWant) {
	t.Helper()
	code, body := s.call(t, "GET", "/api/v1/channels/http:lobby/usage", serveOwnerToken, "")
	var rep budget.Report
	if code != 200 || json.Unmarshal([]byte(body), &rep) != nil {
		t.Fatalf("usage = %d %s; want a report", code, body)
	}
	got := map[budget.Kind]budget.Entry{}
	for _, e := range rep.ChannelUsage {
		got[e.Kind] = e
	}
	if got[budget.Calls].Used != want.calls || got[budget.Tokens].Used != want.tokens ||
		got[budget.Tokens].Limit != 1000000 || got[budget.Seconds].Used < 3 {
		t.Errorf("channel usage = %+v; want %d calls, %d of 1000000 tokens and at least 3 seconds", rep.ChannelUsage, want.calls, want.tokens)
	}
	if len(rep.Installation) != 3 || rep.Installation[0].Used != want.calls {
		t.Errorf("installation usage = %+v; want %d calls", rep.Installation, want.calls)
	}
}
