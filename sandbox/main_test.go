package sandbox

import (
	"fmt"
	"os"
	"testing"
	_ "time/tzdata" // zone checks must not depend on the test host's zoneinfo

	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	teardown, err := setupIntegration()
	if err != nil {
		if dockertest.InCI() {
			// Under CI a missing daemon is a failure, not a reason to skip.
			fmt.Fprintln(os.Stderr, "docker integration setup failed (CI=true):", err)
			return 1
		}
		integ.skip = "Docker integration tests skipped: " + err.Error()
	}
	code := m.Run()
	if teardown != nil {
		if err := teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "docker integration teardown:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	return code
}
