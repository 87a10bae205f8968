package modelapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

var fuzzLevels = []ThinkingLevel{LevelLow, LevelMedium, LevelHigh, LevelXHigh}

func FuzzNormalizeMessages(f *testing.F) {
	for i, tt := range slices.Concat(acceptedMessagesCases, refusedMessagesCases) {
		if len(tt.body) <= maxSeed {
			f.Add(tt.body, uint8(i), tt.count)
		}
	}
	f.Fuzz(func(t *testing.T, body string, level uint8, count bool) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &m) != nil {
			return // the broker answers "Invalid input" before normalising
		}
		p := MessagesParams{Model: "host-model", Level: fuzzLevels[int(level)%len(fuzzLevels)], CountTokens: count}
		if level >= 128 {
			p.MaxOutputTokens = MinMaxOutput + int64(level)
		}
		checkNormalizeMessages(t, body, m, p)
	})
}

// checkNormalizeMessages asserts the properties of one decoded body: a
// refusal is a *Refusal with a message that renders; an accepted body
// stays under every host ceiling, carries only the allowed keys in wire
// order, and normalises again to the same bytes.
func checkNormalizeMessages(t *testing.T, body string, m map[string]json.RawMessage, p MessagesParams) {
	got, err := NormalizeMessages(m, p)
	if err != nil {
		var r *Refusal
		if got != nil || !errors.As(err, &r) || !errors.Is(err, rtsandbox.ErrRefused) || r.Message == "" {
			t.Fatalf("NormalizeMessages(%s) = %v, %v; want nil and a *Refusal", body, got, err)
		}
		if _, raw := r.Render(); !json.Valid(raw) {
			t.Fatalf("Render() = %s; want JSON", raw)
		}
		return
	}
	checkCeilings(t, got, p)
	out, err := jsonjs.Marshal(got)
	if err != nil {
		t.Fatalf("jsonjs.Marshal(NormalizeMessages(%s)) error: %v", body, err)
	}
	wantKeys(t, "messages request", mustMembers(t, out), "model", "messages", "system", "tools", "tool_choice",
		"thinking", "output_config", "max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences")
	var again map[string]json.RawMessage
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("rebuilt body %s does not decode: %v", out, err)
	}
	got2, err := NormalizeMessages(again, p)
	if err != nil {
		t.Fatalf("NormalizeMessages(%s) = %v; want the rebuilt body accepted again", out, err)
	}
	if out2, _ := jsonjs.Marshal(got2); !bytes.Equal(out, out2) {
		t.Fatalf("NormalizeMessages(%s) = %s; want %s (idempotent)", out, out2, out)
	}
}

func checkCeilings(t *testing.T, got *MessagesRequest, p MessagesParams) {
	t.Helper()
	limit := p.MaxOutputTokens
	if limit == 0 {
		limit = DefaultMaxOutput
	}
	if got.Model != p.Model || got.MaxTokens > limit || (p.CountTokens != (got.Stream == nil)) {
		t.Fatalf("model %q, max_tokens %d, stream %v; want %q, at most %d, stream only without count_tokens", got.Model, got.MaxTokens, got.Stream, p.Model, limit)
	}
	c := ceilings[p.Level]
	if got.Thinking != nil && got.Thinking.BudgetTokens > c.budget {
		t.Fatalf("thinking budget %d over the %s ceiling %d", got.Thinking.BudgetTokens, p.Level, c.budget)
	}
	configs := []*OutputConfig{got.OutputConfig}
	for _, msg := range got.Messages {
		configs = append(configs, msg.OutputConfig)
	}
	for _, oc := range configs {
		if oc != nil && slices.Index(efforts, oc.Effort) > c.effort {
			t.Fatalf("effort %q over the %s ceiling %q", oc.Effort, p.Level, efforts[c.effort])
		}
	}
}
