package kubernetes

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// Watch or a follow that outlived its context.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
