package deploy

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestMain stops the test cluster the Kubernetes base's test started, and
// fails the package on a goroutine left behind.
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
