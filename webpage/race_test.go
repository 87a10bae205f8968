//go:build race

package webpage

// raceTimeFactor scales the time bounds of the pathological-markup tests
// under the race detector, which slows this code about tenfold.
const raceTimeFactor = 10
