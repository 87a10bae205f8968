package backup_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Write and Restore start no goroutine; the stores the tests open end
// theirs with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
