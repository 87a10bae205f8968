package budget_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The ledger's writer goroutine ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
