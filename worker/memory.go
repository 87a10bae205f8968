package worker

import (
	"encoding/json"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Memory limits (docs/protocol.md, "Memory tools"), from the shared contract.
const (
	maxMemoryEntries = rtsandbox.MaxMemoryEntries
	maxMemoryBytes   = rtsandbox.MaxMemoryBytes
)

// errMemory matches every refusal of a memory tool (wire.MemoryRefusal).
var errMemory = wire.ErrMemoryRefused

// memory is the channel's store for one turn, as the host passed it in the
// turn JSON; the tools change it here and the reply carries it back. The
// worker is sequential, so it needs no lock, and it touches no file.
type memory struct {
	entries []rtsandbox.MemoryEntry
}

// call runs a memory tool: the input rules and the change itself are the
// shared contract's (wire.ParseMemoryCall, MemoryCall.Apply), the
// same the host applies in session mode. speakerID is the turn's speaker,
// never a tool argument, so a guest cannot reach another speaker's
// namespace; extra arguments are ignored.
//
// input is a map on purpose: a model's tool arguments, whose members
// ParseMemoryCall reads by its typed input.
func (m *memory) call(name string, input map[string]json.RawMessage, speakerID string) (string, error) {
	c, err := wire.ParseMemoryCall(name, input)
	if err != nil {
		return "", err
	}
	return m.run(c, speakerID)
}

// run runs a parsed memory call for speakerID.
func (m *memory) run(c wire.MemoryCall, speakerID string) (string, error) {
	scope := c.StoredScope(speakerID)
	if c.Tool == wire.MemoryGet {
		b, err := jsonjs.Marshal(c.Select(m.entries, scope))
		return string(b), err
	}
	next, result := c.Apply(m.entries, scope)
	// Capacity is checked before the entries are replaced, so a refused
	// change leaves the store as it was.
	if len(next) > maxMemoryEntries || jsonjs.Size(next) > maxMemoryBytes {
		return "", wire.ErrMemoryCapacity
	}
	m.entries = next
	return result, nil
}

// memoryTools declares the memory tools to the model.
var memoryTools = wire.MemoryToolSpecs()
