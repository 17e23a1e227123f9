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
