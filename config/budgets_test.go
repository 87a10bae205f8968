package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

func TestParseBudgets(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Budgets
	}{
		{"absent-is-unlimited", "", Budgets{OnStoreError: StoreDeny}},
		{"empty-is-unlimited", "budgets:\n", Budgets{OnStoreError: StoreDeny}},
		{"empty-mapping", "budgets: {}\n", Budgets{OnStoreError: StoreDeny}},
		{"speaker-calls", "budgets: {per_speaker: {calls: 3}}\n", Budgets{PerSpeaker: BudgetLimits{Calls: 3}, OnStoreError: StoreDeny}},
		{"store-error-allow", "budgets: {per_speaker: {calls: 3}, on_store_error: allow}\n", Budgets{PerSpeaker: BudgetLimits{Calls: 3}, OnStoreError: StoreAllow}},
		{"store-error-deny", "budgets: {per_speaker: {calls: 3}, on_store_error: deny}\n", Budgets{PerSpeaker: BudgetLimits{Calls: 3}, OnStoreError: StoreDeny}},
		{"all", "budgets:\n  per_speaker: {calls: 50, tokens: 200000, seconds: 600}\n" +
			"  per_channel: {calls: 500}\n  per_installation: {tokens: 5000000, seconds: 0}\n",
			Budgets{
				PerSpeaker:      BudgetLimits{Calls: 50, Tokens: 200000, Seconds: 600},
				PerChannel:      BudgetLimits{Calls: 500},
				PerInstallation: BudgetLimits{Tokens: 5000000},
				OnStoreError:    StoreDeny,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tt.in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, c.Budgets); diff != "" {
				t.Errorf("Budgets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseBudgetsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"not-a-mapping", "budgets: 10\n", "budgets: must be a mapping"},
		{"unknown-scope", "budgets: {per_user: {calls: 1}}\n", "budgets.per_user: unknown key"},
		{"unknown-kind", "budgets: {per_channel: {dollars: 1}}\n", "budgets.per_channel.dollars: unknown key"},
		{"negative", "budgets: {per_speaker: {calls: -1}}\n", "budgets.per_speaker.calls: must be an integer of at least 0"},
		{"not-an-integer", "budgets: {per_installation: {tokens: lots}}\n", "budgets.per_installation.tokens: must be an integer"},
		{"too-large", "budgets: {per_speaker: {seconds: 9999999999999999}}\n", "budgets.per_speaker.seconds: must be an integer of at most"},
		{"scope-not-a-mapping", "budgets: {per_channel: 5}\n", "budgets.per_channel: must be a mapping"},
		{"store-error-unknown", "budgets: {on_store_error: retry}\n", `budgets.on_store_error: must be one of ["deny" "allow"]`},
		{"store-error-not-a-string", "budgets: {on_store_error: [deny]}\n", "budgets.on_store_error: must be a string"},
		{"seconds-below-turn-timeout", "budgets: {per_channel: {seconds: 119}}\n", "budgets.per_channel.seconds: must be 0 (unlimited) or at least sandbox.turn_timeout (120s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantOneProblem(t, minimal+tt.in, tt.want) })
	}
}

// wantOneProblem parses in and wants exactly one problem, matching
// rtsandbox.ErrInvalid and containing want.
func wantOneProblem(t *testing.T, in, want string) {
	t.Helper()
	_, err := Parse([]byte(in))
	if err == nil || !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Fatalf("Parse(%q) error = %v; want one matching rtsandbox.ErrInvalid", in, err)
	}
	if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("Parse(%q) error:\n%v\nwant exactly one problem containing %q", in, err, want)
	}
}
