package deploy

import (
	"os"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// watch, an attach, a surface that outlived its Close), after stopping the
// test cluster the Kubernetes tests share, if one was started.
func TestMain(m *testing.M) { os.Exit(k8stest.Main(m)) }
