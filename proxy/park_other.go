//go:build !linux

package proxy

// parker parks nothing on this system: every connection keeps its reader
// goroutine (see park_linux.go).
type parker struct{}

func (p *parker) park(cc *clientConn) bool { return false }
func (p *parker) resume(cc *clientConn)    {}
func (p *parker) close()                   {}

const parkSupported = false
