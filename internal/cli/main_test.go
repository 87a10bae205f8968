package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// SecondSignal's listener ends with its stop function.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
