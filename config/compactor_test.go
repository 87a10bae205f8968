package config

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// withModels adds a models entry "fast" (Anthropic) to minimal.
const withModels = minimal + `models:
  fast: {url: 'https://api.anthropic.com', name: claude-fast, api_key_env: FAST_KEY, api: anthropic}
`

// session.compactor: the built-in summary engine, its defaults (the
// timeout a third of the turn, at most 120 s) and every key.
func TestParseCompactor(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want *Compactor
	}{
		{"off-by-default", minimal, nil},
		{"defaults", minimal + "session: {compactor: {engine: summary}}\n",
			&Compactor{Engine: "summary", Model: "default", Timeout: 120 * time.Second, MaxRequestBytes: 32 << 20,
				MaxSummaryTokens: 4096, MaxInputBytes: 512 << 10}},
		{"default-timeout-a-third-of-the-turn", minimal + "session: {turn_timeout: 300s, compactor: {engine: summary}}\n",
			&Compactor{Engine: "summary", Model: "default", Timeout: 100 * time.Second, MaxRequestBytes: 32 << 20,
				MaxSummaryTokens: 4096, MaxInputBytes: 512 << 10}},
		{"default-timeout-at-least-1s", minimal + "session: {turn_timeout: 2s, compactor: {engine: summary}}\n",
			&Compactor{Engine: "summary", Model: "default", Timeout: time.Second, MaxRequestBytes: 32 << 20,
				MaxSummaryTokens: 4096, MaxInputBytes: 512 << 10}},
		{"every-key", withModels + "session:\n  compactor:\n    engine: summary\n    model: fast\n    timeout: 300s\n" +
			"    max_request_mb: 96\n    max_summary_tokens: 256\n    max_input_kb: 16\n",
			&Compactor{Engine: "summary", Model: "fast", Timeout: 300 * time.Second, MaxRequestBytes: 96 << 20,
				MaxSummaryTokens: 256, MaxInputBytes: 16 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, c.Session.Compactor); diff != "" {
				t.Errorf("Compactor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompactorModel(t *testing.T) {
	c, err := Parse([]byte(withModels + "session: {compactor: {engine: summary, model: fast}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.CompactorModel()
	if !ok || m.Name != "claude-fast" || m.API != "anthropic" || m.APIKeyEnv != "FAST_KEY" {
		t.Errorf("CompactorModel = %+v, %v", m, ok)
	}
	c.Session.Compactor = nil
	if _, ok := c.CompactorModel(); ok {
		t.Error("CompactorModel without a compactor is ok")
	}
}

// Each refusal names the key and the rule; docs/broker.md, "The pipeline, in order" "The compactor's
// timeout must leave half the turn", named or by default.
func TestParseCompactorErrors(t *testing.T) {
	checkParseErrors(t, []errorTest{
		{"compactor-engine-missing", minimal + "session: {compactor: {model: default}}\n", []string{"session.compactor.engine: is required"}},
		{"compactor-engine-unknown", minimal + "session: {compactor: {engine: jev}}\n", []string{`session.compactor.engine: must be "summary" (the built-in summary engine)`}},
		{"compactor-unknown-key", minimal + "session: {compactor: {engine: summary, url: 'https://x/'}}\n", []string{"session.compactor.url: unknown key"}},
		{"compactor-not-mapping", minimal + "session: {compactor: summary}\n", []string{"session.compactor: must be a mapping"}},
		{"compactor-unknown-model", withModels + "session: {compactor: {engine: summary, model: slow}}\n", []string{
			`session.compactor.model: must name "default" (the model block) or an entry of models (known: default, fast)`}},
		{"compactor-timeout-over-half-the-turn", minimal + "session: {turn_timeout: 100s, compactor: {engine: summary, timeout: 51s}}\n", []string{
			"session.compactor.timeout: must leave half the turn: at most 50s, half of session.turn_timeout 100s (the compactor's timeout is 51s)"}},
		{"compactor-default-timeout-over-half-the-turn", minimal + "session: {turn_timeout: 1s, compactor: {engine: summary}}\n", []string{
			"session.compactor.timeout: must leave half the turn: at most 0.5s, half of session.turn_timeout 1s (the compactor's timeout is 1s)"}},
		{"compactor-timeout-short", minimal + "session: {compactor: {engine: summary, timeout: 999ms}}\n", []string{"session.compactor.timeout: must be a duration from 1s to 600s"}},
		{"compactor-timeout-long", minimal + "session: {turn_timeout: 1h, compactor: {engine: summary, timeout: 601s}}\n", []string{"session.compactor.timeout: must be a duration from 1s to 600s"}},
		{"compactor-timeout-bare", minimal + "session: {compactor: {engine: summary, timeout: 60}}\n", []string{"session.compactor.timeout: must be a duration string with a unit"}},
		{"compactor-request-over-96", minimal + "session: {compactor: {engine: summary, max_request_mb: 97}}\n", []string{"session.compactor.max_request_mb: must be an integer of at most 96"}},
		{"compactor-request-zero", minimal + "session: {compactor: {engine: summary, max_request_mb: 0}}\n", []string{"session.compactor.max_request_mb: must be an integer of at least 1"}},
		{"compactor-summary-tokens-low", minimal + "session: {compactor: {engine: summary, max_summary_tokens: 255}}\n", []string{"session.compactor.max_summary_tokens: must be an integer of at least 256"}},
		{"compactor-input-high", minimal + "session: {compactor: {engine: summary, max_input_kb: 8193}}\n", []string{"session.compactor.max_input_kb: must be an integer of at most 8192"}},
	})
}

// The worker body limits default to what host.memory_limit_mb can decode
// when that is below their own defaults (issue 21): a body being decoded
// holds up to rtsandbox.DecodeFactor times its size, and all of them
// together half of the memory limit.
func TestBodyLimitsFollowTheMemoryLimit(t *testing.T) {
	tests := []struct {
		memoryMB         int
		request, compact int64 // MiB
	}{
		{1024, 96, 32},
		{512, 51, 32},
		{256, 25, 25},
		{128, 12, 12},
		{64, 6, 6},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.memoryMB), func(t *testing.T) {
			in := minimal + fmt.Sprintf("host: {memory_limit_mb: %d}\nsession: {compactor: {engine: summary}}\n", tt.memoryMB)
			c, err := Parse([]byte(in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := c.Session.MaxRequestBytes >> 20; got != tt.request {
				t.Errorf("session.max_request_mb = %d; want %d", got, tt.request)
			}
			if got := c.Session.Compactor.MaxRequestBytes >> 20; got != tt.compact {
				t.Errorf("session.compactor.max_request_mb = %d; want %d", got, tt.compact)
			}
			bare, err := Parse([]byte(minimal + fmt.Sprintf("host: {memory_limit_mb: %d}\n", tt.memoryMB)))
			if err != nil || bare.Session.MaxRequestBytes>>20 != tt.request {
				t.Errorf("without a session block: max_request_mb %d, %v; want %d", bare.Session.MaxRequestBytes>>20, err, tt.request)
			}
		})
	}
}
