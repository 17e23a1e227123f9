package daemon

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// machineIdle returns a reader of the idle and iowait time of all the
// machine's cores (the "cpu" line of /proc/stat), or nil when it cannot
// be read. The reader is for one goroutine.
func machineIdle() func() time.Duration {
	f := func() (time.Duration, bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, false
		}
		line, _, _ := bytes.Cut(b, []byte{'\n'})
		fs := bytes.Fields(line)
		if len(fs) < 6 || string(fs[0]) != "cpu" {
			return 0, false
		}
		var ticks int64
		for _, x := range fs[4:6] { // idle, iowait
			v, err := strconv.ParseInt(string(x), 10, 64)
			if err != nil {
				return 0, false
			}
			ticks += v
		}
		return time.Duration(ticks) * (time.Second / userHZ), true
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

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100
