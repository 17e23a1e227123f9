package bench

import (
	"bytes"
	"fmt"
	"strconv"
	"syscall"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcessCPUSeconds returns the user+system CPU time of process pid from
// /proc/PID/stat (Linux only).
func ProcessCPUSeconds(pid int) (float64, error) {
	var buf [1024]byte
	f, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	defer syscall.Close(f)
	n, err := syscall.Read(f, buf[:])
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	return parseProcStatCPU(buf[:max(n, 0)])
}

// parseProcStatCPU extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat line, in seconds. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func parseProcStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat: no command field")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: /proc stat: %d fields after command", len(fields))
	}
	ut, err1 := strconv.ParseUint(string(fields[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc stat: bad utime/stime %q %q", fields[11], fields[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// selfCPUSeconds is this process's user+system CPU time.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
