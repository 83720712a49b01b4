//go:build !race

package main

// raceDetector reports a test binary built with -race.
const raceDetector = false
