//go:build tools

// Package tools pins gVisor's runsc and its containerd shim, which
// scripts/k8s-tools.sh builds for the real-Pod tier (Go 1.23 has no tool
// directive).
package tools

import (
	_ "gvisor.dev/gvisor/runsc"
	_ "gvisor.dev/gvisor/shim"
)
