package inflight_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A journal's writer goroutine ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
