package kubernetes

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestMain runs the tests, stops the test cluster if one was started
// (k8stest), and fails the package when a test left a goroutine behind: a
// Watch, a follow or an attach that outlived its context.
func TestMain(m *testing.M) {
	code := k8stest.Main(m)
	if code == 0 {
		if err := goleak.Find(k8stest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
