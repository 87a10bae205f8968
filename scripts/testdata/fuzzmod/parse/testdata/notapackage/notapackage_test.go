// Package notapackage sits under testdata, which go's ./... skips, and so
// must scripts/fuzz-smoke.sh: in the repository such a directory belongs
// to a fixture (another module, which the main module's go test refuses).
package notapackage

import "testing"

func FuzzUnderTestdata(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {})
}
