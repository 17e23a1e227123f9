package bench

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// stampedReader reads c and reports when the kernel received the bytes
// read (SO_TIMESTAMPNS), so that a relay busy with other work does not
// add its own lateness to the delay; it falls back to time.Now.
func stampedReader(c net.Conn) func([]byte) (int, time.Time, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return plainReader(c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return plainReader(c)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return plainReader(c)
	}
	oob := make([]byte, syscall.CmsgSpace(int(unsafe.Sizeof(syscall.Timespec{}))))
	return func(p []byte) (int, time.Time, error) {
		var n, oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, oob, 0)
			return rerr != syscall.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return 0, time.Time{}, err
		}
		if n == 0 {
			return 0, time.Time{}, io.EOF
		}
		return n, rxTime(oob[:oobn]), nil
	}
}

// rxTime is the receive timestamp in oob, or now.
func rxTime(oob []byte) time.Time {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				return time.Unix(ts.Unix())
			}
		}
	}
	return time.Now()
}
