//go:build !linux

package fastconn

import "net"

// Unread cannot be known here: ok is false.
func Unread(net.Conn) (n int, ok bool) { return 0, false }
