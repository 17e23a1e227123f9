//go:build !linux

package daemon

import "time"

// machineIdle is nil where /proc/uptime does not exist: the Ps then double
// on the process's CPU use alone.
func machineIdle() func() time.Duration { return nil }
