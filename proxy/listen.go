package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ParseListen splits a listen spec into network and address. Accepted
// forms: "host:port" (tcp), Twemproxy's "/path/mc.sock [mode]" and
// "unix:/path/mc.sock [mode]" (a Unix socket; mode is octal file
// permission, e.g. 0666; 0 keeps the umask's). Errors wrap ErrConfig.
func ParseListen(spec string) (network, addr string, mode os.FileMode, err error) {
	s := strings.TrimSpace(spec)
	unix := false
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		s, unix = rest, true
	} else if strings.HasPrefix(s, "/") {
		unix = true
	}
	if !unix {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return "", "", 0, fmt.Errorf("%w: listen %q: %w", ErrConfig, spec, err)
		}
		return "tcp", s, 0, nil
	}
	f := strings.Fields(s)
	switch {
	case len(f) == 0 || !strings.HasPrefix(f[0], "/"):
		return "", "", 0, fmt.Errorf("%w: listen %q: want an absolute socket path", ErrConfig, spec)
	case len(f) > 2:
		return "", "", 0, fmt.Errorf("%w: listen %q: want \"/path [mode]\"", ErrConfig, spec)
	case len(f) == 2:
		m, perr := strconv.ParseUint(f[1], 8, 32)
		if perr != nil || m > 0o777 {
			return "", "", 0, fmt.Errorf("%w: listen %q: mode %q is not octal permission bits", ErrConfig, spec, f[1])
		}
		mode = os.FileMode(m)
	}
	return "unix", f[0], mode, nil
}

// listenKey identifies the socket a listen spec opens: the same key means
// the same socket, whatever the spelling or the Unix socket's mode.
func listenKey(spec string) string {
	network, addr, _, err := ParseListen(spec)
	if err != nil {
		return spec
	}
	return network + " " + addr
}

// Listen opens a listener for a listen spec (see ParseListen). A Unix
// socket file left behind by a dead process (nothing accepts on it) is
// removed first; the socket's mode is set when given. Closing the
// listener removes the socket file.
func Listen(spec string) (net.Listener, error) {
	network, addr, mode, err := ParseListen(spec)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen(network, addr)
	if err != nil && network == "unix" && errors.Is(err, syscall.EADDRINUSE) {
		if c, derr := net.DialTimeout("unix", addr, 100*time.Millisecond); derr == nil {
			_ = c.Close()
			return nil, err // someone serves it
		}
		_ = os.Remove(addr)
		ln, err = net.Listen(network, addr)
	}
	if err != nil {
		return nil, err
	}
	if network == "unix" && mode != 0 {
		if err := os.Chmod(addr, mode); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// tooManyClients is the reply to a client beyond ServerConfig.MaxClients.
var tooManyClients = []byte("SERVER_ERROR too many client connections\r\n")

// clientLimits are the Server's client connection limits; they can change
// while it runs (SetClientLimits).
type clientLimits struct {
	max      atomic.Int64
	idle     atomic.Int64 // nanoseconds; 0 = no idle timeout
	tick     atomic.Int64 // coarse clock (UnixNano), advanced by the sweeper
	request  atomic.Int64 // nanoseconds; 0 = no request timeout
	park     int64        // nanoseconds (ParkAfter); 0 = never park; set once by NewServer
	rejected atomic.Uint64
	idled    atomic.Uint64
	slow     atomic.Uint64 // closed by the request timeout
	sweeping bool          // under Server.mu
	stop     chan struct{} // closed by Shutdown
}

// SetClientLimits changes the client connection limit and idle timeout
// (see ServerConfig.MaxClients and ClientIdleTimeout); zero disables
// either. Connections above a lowered limit are not closed.
func (s *Server) SetClientLimits(maxClients int, idle time.Duration) {
	s.cl.max.Store(int64(maxClients))
	s.cl.idle.Store(int64(idle))
}

// ClientLimits returns the current limit and idle timeout.
func (s *Server) ClientLimits() (maxClients int, idle time.Duration) {
	return int(s.cl.max.Load()), time.Duration(s.cl.idle.Load())
}

// overClientLimit answers and closes nc when the server is at its client
// limit.
func (s *Server) overClientLimit(nc net.Conn) bool {
	m := s.cl.max.Load()
	if m <= 0 || s.st.currConns.Load() < m {
		return false
	}
	s.cl.rejected.Add(1)
	_ = nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = nc.Write(tooManyClients)
	_ = nc.Close()
	return true
}

// parkSweep is the sweep period where connections park, and parkEagerAt
// the number of idle clients (parked, or unparked with nothing read for a
// whole sweep) from which the sweeper parks every idle one, not only those
// silent for ParkAfter (see ServerConfig); counting the parked ones keeps
// a wave's last stragglers, and the clients of a mostly idle fleet, on the
// short delay. A wave of connections that go idle (a fleet's pools, a
// flood) then holds few goroutines, stacks and runtime descriptors at
// once: each leaves memory behind that the runtime reuses but never frees
// (its goroutine's g, its poll descriptor, span metadata). A few idle
// clients cost little unparked, and each park and resume costs about a
// dozen system calls and a new clientConn, so they wait ParkAfter; so does
// a client that came back after parking (a pool's connection, not a
// flood's), which would otherwise pay a resume on every return. The
// figures behind both are in bench/RESULTS.md ("Idle connections and
// memory", "Figures behind code defaults").
const (
	parkSweep   = 50 * time.Millisecond
	parkEagerAt = 256
)

// startIdleSweeper starts the goroutine that advances the coarse clock and
// closes idle clients, once; s.mu must be held and s not closed.
func (s *Server) startIdleSweeper() {
	if s.cl.sweeping {
		return
	}
	s.cl.sweeping = true
	s.cl.stop = make(chan struct{})
	s.cl.tick.Store(s.now().UnixNano())
	s.wg.Add(1)
	go s.sweepIdle(s.cl.stop)
}

// stopIdleSweeper stops the sweeper; s.mu must be held.
func (s *Server) stopIdleSweeper() {
	if s.cl.sweeping {
		close(s.cl.stop)
		s.cl.sweeping = false
	}
}

// sweepIdle closes, every quarter of the idle or request timeout
// (10ms..1s; at most parkSweep where connections park), the clients that
// have read nothing for the idle timeout and have no request queued
// (parked ones too), and those whose incomplete request began more than
// the request timeout ago: their reading side stops, so the replies
// still due are written before the connection closes. It asks the
// clients that have read nothing for ParkAfter to park (askPark), and
// every idle one not resumed from parking while parkEagerAt or more are
// idle or parked.
func (s *Server) sweepIdle(stop <-chan struct{}) {
	defer s.wg.Done()
	every := func() time.Duration {
		d := time.Second
		if s.cl.park > 0 {
			d = parkSweep
		}
		for _, v := range []int64{s.cl.idle.Load(), s.cl.request.Load()} {
			if v > 0 {
				d = min(d, max(time.Duration(v)/4, 10*time.Millisecond))
			}
		}
		return d
	}
	period := every()
	var idlers []*clientConn // reused from sweep to sweep
	t := time.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := s.now().UnixNano()
		prev := s.cl.tick.Swap(now)
		idle, req := s.cl.idle.Load(), s.cl.request.Load()
		// A client's active tick is the last sweep before its last read,
		// at most a period earlier: one whose tick is older than
		// ParkAfter and a period has been silent for ParkAfter at least;
		// one whose tick is older than the previous sweep has read nothing
		// for a whole period (idle: parked at once when parkEagerAt
		// clients are idle, parked ones included).
		parkBefore := now - s.cl.park - int64(period)
		var resumedIdle int64 // idle clients that park after ParkAfter only
		s.mu.Lock()
		for cc := range s.conns {
			if cc.stopped.Load() {
				continue
			}
			active := cc.active.Load()
			switch p := cc.partial.Load(); {
			case req > 0 && p != 0 && now-p > req:
				s.cl.slow.Add(1)
				cc.stopReading()
			case idle > 0 && now-active > idle && cc.queueLen() == 0:
				s.cl.idled.Add(1)
				cc.stopReading()
			case p == 0 && s.cl.park > 0 && active < prev:
				switch {
				case active < parkBefore:
					cc.askPark() // nothing read for ParkAfter
				case cc.resumed:
					resumedIdle++
				default:
					idlers = append(idlers, cc)
				}
			}
		}
		if resumedIdle+int64(len(idlers))+s.st.parked.Load() >= parkEagerAt {
			for _, cc := range idlers {
				cc.askPark()
			}
		}
		s.mu.Unlock()
		clear(idlers)
		idlers = idlers[:0]
		if idle > 0 {
			s.cl.idled.Add(uint64(s.park.expire(now - idle)))
		}
		s.mem.Maybe(s.st.parked.Load(), time.Unix(0, now), &s.wg)
		period = every()
		t.Reset(period)
	}
}
