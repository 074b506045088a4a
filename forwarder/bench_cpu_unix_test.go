//go:build unix

package forwarder_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used: the Go side of a
// drain, without the database server's work.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
