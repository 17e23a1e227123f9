package fastconn

import (
	"net"

	"golang.org/x/sys/unix"
)

// Unread is the number of bytes nc's socket has received that were not
// read yet (SIOCINQ); ok is false when it cannot be known (no socket).
func Unread(nc net.Conn) (n int, ok bool) {
	if s, isConn := nc.(*Conn); isConn {
		nc = s.Conn
	}
	rc := rawConn(nc)
	if rc == nil {
		return 0, false
	}
	var err error
	if cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}
