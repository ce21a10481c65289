package kafka

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every
// Linux architecture Go runs on (the kernel exports it as a constant to user space).
const clockTicksPerSecond = 100

// ProcessCPU is the CPU time (user and system, all threads) that process pid has used,
// from /proc/<pid>/stat. Its resolution is a clock tick (10 ms): measure spans of seconds.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("kafka: CPU time of pid %d: %w", pid, err)
	}
	utime, stime, err := parseProcStat(data)
	if err != nil {
		return 0, fmt.Errorf("kafka: /proc/%d/stat: %w", pid, err)
	}
	return ticksToDuration(utime + stime), nil
}

// ProcessesCPU sums ProcessCPU over pids.
func ProcessesCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

func ticksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * (time.Second / clockTicksPerSecond)
}

// parseProcStat returns utime and stime (fields 14 and 15, in clock ticks) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and may itself hold
// spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(data []byte) (utime, stime uint64, err error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 || bytes.IndexByte(data, '(') < 0 {
		return 0, 0, fmt.Errorf("no (command) in %q", firstBytes(data))
	}
	// After the command: state (field 3) is index 0, so field k is index k-3.
	f := bytes.Fields(data[end+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%d fields after the command, want at least 13", len(f))
	}
	if utime, err = strconv.ParseUint(string(f[11]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("utime: %w", err)
	}
	if stime, err = strconv.ParseUint(string(f[12]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stime: %w", err)
	}
	return utime, stime, nil
}

func firstBytes(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// selfCPU is this process's CPU time (user and system), from getrusage.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
