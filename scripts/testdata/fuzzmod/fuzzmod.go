// Package fuzzmod is the fixture module's root package: fuzz-smoke.sh
// names a root package's test binary after the module path.
package fuzzmod

import "strings"

// Words splits s at spaces, dropping empty words.
func Words(s string) []string { return strings.Fields(s) }
