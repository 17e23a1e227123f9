//go:build !linux

package proxy

// parker parks nothing on this system: every connection keeps its reader
// goroutine (see park_linux.go).
type parker struct{ s *Server }

func (p *parker) park(cc *clientConn) bool { return false }
func (p *parker) expire(cutoff int64) int  { return 0 }
func (p *parker) close()                   {}

const parkSupported = false
