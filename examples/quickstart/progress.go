package main

import (
	"fmt"
	"os"
	"time"
)

// showProgress shows label and done()/total on the terminal's current line,
// updated every 150ms, until stop clears the line. It shows nothing when
// stdout is not a terminal.
func showProgress(label string, done func() int, total int) (stop func()) {
	if fi, err := os.Stdout.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	show := func() { fmt.Printf("\r%s: %d/%d deliveries handled", label, done(), total) }
	show()
	stopShowing := every(150*time.Millisecond, show)
	return func() {
		stopShowing()
		fmt.Print("\r\033[K")
	}
}
