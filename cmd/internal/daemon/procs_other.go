//go:build !unix

package daemon

import "time"

// processCPU is nil where getrusage does not exist: GovernProcs then
// leaves GOMAXPROCS alone.
var processCPU func() time.Duration
