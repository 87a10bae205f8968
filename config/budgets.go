package config

import (
	"fmt"
	"math"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxBudget bounds every daily budget figure (about 10^15: no real day
// reaches it, and sums stay far within int64).
const MaxBudget = 1 << 50

// Budgets are the daily budgets (UTC days) per speaker, per channel and
// for the whole installation. The zero value is unlimited.
type Budgets struct {
	PerSpeaker, PerChannel, PerInstallation BudgetLimits
	// OnStoreError is what a turn meets while the usage database cannot
	// be written (budgets.on_store_error): StoreDeny (the default) refuses
	// new turns with the store's own text; StoreAllow runs them, counted
	// in memory until the database takes the counts again.
	OnStoreError string
}

// The policies of budgets.on_store_error.
const (
	StoreDeny  = "deny"
	StoreAllow = "allow"
)

// BudgetLimits are one scope's daily limits; 0 is unlimited.
type BudgetLimits struct {
	Calls   int64 // broker calls
	Tokens  int64 // upstream model tokens (the upstream's usage.total_tokens)
	Seconds int64 // turn seconds, each turn rounded up to whole seconds
}

// Set reports whether any limit is configured.
func (b Budgets) Set() bool {
	return b.PerSpeaker != BudgetLimits{} || b.PerChannel != BudgetLimits{} || b.PerInstallation != BudgetLimits{}
}

// budgets parses "budgets". Absent, empty or a 0 means unlimited. A
// seconds limit must leave room for one whole turn: each turn reserves its
// turn timeout (the longest of the modes in use, at timeoutKey) before it
// starts, so a smaller limit would refuse every turn.
func (p *parser) budgets(n *yaml.Node, turnTimeout time.Duration, timeoutKey string) Budgets {
	b := Budgets{OnStoreError: StoreDeny}
	if n == nil {
		return b
	}
	o, ok := p.object(n, "budgets", "per_speaker", "per_channel", "per_installation", "on_store_error")
	if !ok {
		return b
	}
	b.PerSpeaker = p.budgetLimits(o.get("per_speaker"), o.at("per_speaker"), turnTimeout, timeoutKey)
	b.PerChannel = p.budgetLimits(o.get("per_channel"), o.at("per_channel"), turnTimeout, timeoutKey)
	b.PerInstallation = p.budgetLimits(o.get("per_installation"), o.at("per_installation"), turnTimeout, timeoutKey)
	if v, ok := p.text(o, "on_store_error", false, storePolicyRule); ok {
		b.OnStoreError = v
	}
	return b
}

// storePolicyRule wants deny or allow.
func storePolicyRule(s string) string {
	policies := []string{StoreDeny, StoreAllow}
	if !slices.Contains(policies, s) {
		return fmt.Sprintf("must be one of %q", policies)
	}
	return ""
}

func (p *parser) budgetLimits(n *yaml.Node, path string, turnTimeout time.Duration, timeoutKey string) BudgetLimits {
	if n == nil {
		return BudgetLimits{}
	}
	o, ok := p.object(n, path, "calls", "tokens", "seconds")
	if !ok {
		return BudgetLimits{}
	}
	l := BudgetLimits{
		Calls:   int64(p.integer(o, "calls", 0, 0, MaxBudget)),
		Tokens:  int64(p.integer(o, "tokens", 0, 0, MaxBudget)),
		Seconds: int64(p.integer(o, "seconds", 0, 0, MaxBudget)),
	}
	if turn := int64(math.Ceil(turnTimeout.Seconds())); l.Seconds > 0 && l.Seconds < turn {
		p.fail(o.get("seconds"), o.at("seconds"), "must be 0 (unlimited) or at least %s (%ds): each turn reserves its whole timeout before it starts", timeoutKey, turn)
	}
	return l
}
