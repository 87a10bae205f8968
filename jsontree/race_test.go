//go:build race

package jsontree

// raceEnabled scales the adversarial shapes down under the race detector,
// which slows a byte-by-byte scan some twenty times.
const raceEnabled = true
