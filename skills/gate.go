package skills

import (
	"fmt"
	"sync"
)

// Gate tracks which skills were read and blocks the tools they gate until
// then. It is safe for concurrent use.
type Gate struct {
	owner map[string]string // tool → gating skill; shared with the Index, read-only
	mu    sync.Mutex
	read  map[string]bool
}

// Gate returns a new gate with no skill read. The worker keeps one for
// its whole process.
func (ix *Index) Gate() *Gate {
	return &Gate{owner: ix.owner, read: map[string]bool{}}
}

// Blocked reports whether tool may not run yet, with the reason the model
// is told.
func (g *Gate) Blocked(tool string) (reason string, blocked bool) {
	skill, ok := g.owner[tool]
	if !ok {
		return "", false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.read[skill] {
		return "", false
	}
	return fmt.Sprintf("Read the %s skill with read_skill first; it sets how %s is used here.", skill, tool), true
}

// MarkRead records that skill's SKILL.md was read. Call it after a
// successful Read of the skill's SKILL.md, not of another file.
func (g *Gate) MarkRead(skill string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.read[skill] = true
}
