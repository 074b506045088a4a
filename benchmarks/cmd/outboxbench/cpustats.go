package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the CPU time (user and system) used so far by this process and by the
// database server's processes on this machine: those whose command name is postgres,
// mariadbd or mysqld. The figures come from /proc (Linux only); a server process that
// exits between two samples takes its CPU time with it, which is why the harness keeps
// its connections open (engine pool).
type cpuSample struct {
	self, db time.Duration
}

// clockTick is the unit of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// readCPU samples the CPU time of this process and the database server's processes.
func readCPU() (cpuSample, error) {
	var s cpuSample
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return s, fmt.Errorf("-cpustats needs /proc: %w", err)
	}
	self := strconv.Itoa(os.Getpid())
	found := false
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		comm, ticks, err := procStat(e.Name())
		if err != nil {
			continue // it exited meanwhile
		}
		switch {
		case e.Name() == self:
			s.self, found = ticks, true
		case comm == "postgres" || comm == "mariadbd" || comm == "mysqld":
			s.db += ticks
		}
	}
	if !found {
		return s, errors.New("-cpustats: this process is not in /proc")
	}
	return s, nil
}

// procStat returns the command name and the CPU time (utime + stime) of process pid.
func procStat(pid string) (string, time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", 0, fmt.Errorf("/proc/%s/stat: unexpected format", pid)
	}
	// After the command name: state, ppid, ... utime is the 14th field of the line,
	// the 12th after the name, stime the 13th.
	f := strings.Fields(s[end+2:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return s[open+1 : end], time.Duration(utime+stime) * clockTick, nil
}

// cpuUse measures fn's CPU use: this process's and the database server's, in seconds
// per 100,000 rows of n. Without -cpustats (on) it only runs fn.
func cpuUse(on bool, n int, fn func() error) (self, db float64, err error) {
	if !on {
		return 0, 0, fn()
	}
	before, err := readCPU()
	if err != nil {
		return 0, 0, err
	}
	if err := fn(); err != nil {
		return 0, 0, err
	}
	after, err := readCPU()
	if err != nil {
		return 0, 0, err
	}
	per := 100_000 / float64(n)
	return (after.self - before.self).Seconds() * per, (after.db - before.db).Seconds() * per, nil
}
