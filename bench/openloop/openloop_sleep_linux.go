package openloop

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper waits until a request's intended send time on a timerfd served
// by the runtime's poller. A time.Timer is not precise enough for an
// open-loop schedule: when the process is idle the runtime sleeps in
// epoll_wait with a timeout in whole milliseconds (anything under 1 ms
// rounds up to 1 ms), so a worker would wake up to 1 ms late, more than
// the floor's whole round trip. A timerfd is a kernel high-resolution timer: its expiry
// wakes the poller at the intended time.
type sleeper struct {
	f   *os.File
	rc  syscall.RawConn
	fd  int
	buf [8]byte
	t   *timerSleeper // fallback when the timerfd could not be made
}

// newSleeper returns a sleeper; close releases it.
func newSleeper() *sleeper {
	s := &sleeper{}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err == nil {
		s.f = os.NewFile(uintptr(fd), "openloop-timerfd")
		if s.rc, err = s.f.SyscallConn(); err == nil {
			s.fd = fd
			return s
		}
		s.f.Close()
		s.f = nil
	}
	s.t = newTimerSleeper()
	return s
}

// sleep waits d (> 0), or until done is closed (done is only watched by
// the time.Timer fallback: a timerfd wait lasts at most one request
// interval of the schedule).
func (s *sleeper) sleep(d time.Duration, done <-chan struct{}) {
	if s.f == nil {
		s.t.sleep(d, done)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if unix.TimerfdSettime(s.fd, 0, &spec, nil) != nil {
		time.Sleep(d)
		return
	}
	_ = s.rc.Read(func(fd uintptr) bool {
		_, err := unix.Read(int(fd), s.buf[:])
		return err != unix.EAGAIN && err != unix.EINTR
	})
}

// close releases the timer.
func (s *sleeper) close() {
	if s.f != nil {
		s.f.Close()
	} else {
		s.t.close()
	}
}
