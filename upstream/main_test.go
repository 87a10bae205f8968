package upstream

import (
	"testing"

	"go.uber.org/goleak"
)

// The client's streams and the MCP sessions start goroutines: each ends
// with its body or session.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
