//go:build !linux

package bench

import (
	"net"
	"time"
)

// stampedReader reads c and reports when the bytes were read.
func stampedReader(c net.Conn) func([]byte) (int, time.Time, error) {
	return plainReader(c)
}
