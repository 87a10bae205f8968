package k8stest_test

import (
	"os"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestMain stops the cluster the test started and fails on a goroutine
// left behind.
func TestMain(m *testing.M) { os.Exit(k8stest.Main(m)) }
