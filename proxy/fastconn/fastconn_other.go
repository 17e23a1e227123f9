//go:build !unix

package fastconn

import (
	"net"
	"syscall"
)

// Elsewhere than on Unix a Conn forwards every call to its conn.

func rawConn(net.Conn) syscall.RawConn { return nil }

func (s *Conn) initRaw() {}

func (s *Conn) shutdownRaw() error { return s.Conn.Close() }

// rawRead is unused where Conns make no raw calls (Batch has no ring).
func rawRead(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }
