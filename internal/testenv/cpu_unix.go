//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user and system) this process used so
// far, or 0 where the system does not tell.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
