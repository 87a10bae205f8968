//go:build race

package broker_test

// raceEnabled scales the adversarial bodies down under the race detector,
// which slows a byte-by-byte scan some twenty times.
const raceEnabled = true
