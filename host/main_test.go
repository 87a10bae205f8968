package host

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// The host starts goroutines (the router's, the surfaces', the restart
// notices, the ledger's writer, the watches): each ends with Close. The
// Kubernetes engine's tests share one test cluster, stopped after them.
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
