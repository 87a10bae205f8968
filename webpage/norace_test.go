//go:build !race

package webpage

// raceTimeFactor scales the time bounds of the pathological-markup tests;
// 1 without the race detector (see race_test.go).
const raceTimeFactor = 1
