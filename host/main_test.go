package host

import (
	"testing"

	"go.uber.org/goleak"
)

// The host starts goroutines (the router's, the surfaces', the restart
// notices, the ledger's writer, the watches): each ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
