//go:build !unix

package counter

import (
	"net"
	"syscall"
)

// Elsewhere than on Unix a FastConn forwards every call to its conn.

func rawConn(net.Conn) syscall.RawConn { return nil }

func (s *FastConn) initRaw() {}

func (s *FastConn) shutdownRaw() error { return s.Conn.Close() }
