//go:build !unix

package webpage

import "time"

// processCPU is not measured here; the tests fall back to wall time.
func processCPU() (time.Duration, bool) { return 0, false }
