//go:build !race

package modelapi

const raceEnabled = false
