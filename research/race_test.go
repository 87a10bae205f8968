//go:build race

package research

// raceTimeFactor scales the time bound of the pathological-page test
// under the race detector, which slows extraction about tenfold.
const raceTimeFactor = 10
