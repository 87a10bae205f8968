package host

import (
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/sealed"
)

// PoolSize is the warm pool serve keeps for sealed turns: sandbox.pool.size
// as written, or, when unset (derived true), sealed.DefaultPoolSize of the
// turn bound serve runs with and the sealed memory limit. One-shot
// commands (turn, chat, demo) keep no pool: a warm worker would outlive
// their one turn for nothing.
func PoolSize(cfg *config.Config) (n int, derived bool) {
	if cfg.Sandbox.PoolSize != nil {
		return *cfg.Sandbox.PoolSize, false
	}
	mem := cfg.Sandbox.Limits.MemoryMB
	turns := cfg.Sandbox.MaxTurns
	if turns == 0 {
		turns = sealed.DefaultMaxTurns(mem)
	}
	return sealed.DefaultPoolSize(turns, mem), true
}
