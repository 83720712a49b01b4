//go:build !race

package main

// raceEnabled is whether the tests run with the race detector, so that the
// command they build does too.
const raceEnabled = false
