package daemon

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// machineIdle returns a reader of the time all the machine's cores spent
// idle (the second field of /proc/uptime, which is cheap to read:
// /proc/stat costs milliseconds on a busy machine), or nil when it cannot
// be read. The reader is for one goroutine.
func machineIdle() func() time.Duration {
	var buf [128]byte
	f := func() (time.Duration, bool) {
		fd, err := os.Open("/proc/uptime")
		if err != nil {
			return 0, false
		}
		n, _ := fd.Read(buf[:])
		fd.Close()
		fs := bytes.Fields(buf[:n])
		if len(fs) < 2 {
			return 0, false
		}
		s, err := strconv.ParseFloat(string(fs[1]), 64)
		if err != nil {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	last, ok := f()
	if !ok {
		return nil
	}
	return func() time.Duration { // the last good reading when one fails
		if d, ok := f(); ok {
			last = d
		}
		return last
	}
}
