//go:build !race

package research

// raceTimeFactor scales the time bound of the pathological-page test; 1
// without the race detector (see race_test.go).
const raceTimeFactor = 1
