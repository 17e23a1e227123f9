package shard

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Server is one shard of a pool, in config order: the one shard type of
// Membership and of every placement (Ring, Ketama, Modula, Random). The
// zero Weight means 1.
type Server struct {
	// Addr is "host:port", or a Unix socket path starting with "/".
	Addr string
	// Weight is the server's relative share; default 1.
	Weight int
	// Name is the optional Twemproxy instance name (after the weight in a
	// "servers:" entry). When set it identifies the server in placement
	// instead of Addr, so a server can move to another address without
	// moving its keys.
	Name string
}

// Label is the server's identity: its Name, else its Addr. The consistent
// Ring places by it, and stats name shards by it (as nutcracker's do).
func (s Server) Label() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Addr
}

func (s Server) weight() int {
	if s.Weight > 0 {
		return s.Weight
	}
	return 1
}

// ketamaLabel is the string Twemproxy hashes for the server's points: the
// name when present; else the host alone when the port is 11211
// (libmemcached compatibility); else "host:port". For a Unix socket path
// Twemproxy's parser yields "path:" (the empty port keeps its separator).
func (s Server) ketamaLabel() string {
	if s.Name != "" {
		return s.Name
	}
	if strings.HasPrefix(s.Addr, "/") {
		return s.Addr + ":"
	}
	host, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return s.Addr
	}
	if p, err := strconv.Atoi(port); err == nil && p == ketamaDefaultPort {
		return host
	}
	return s.Addr
}

// ErrLiveView reports a liveness view whose length is not the number of
// servers.
var ErrLiveView = errors.New("shard: liveness view does not match the servers")

// checkLive validates a liveness view (see the package doc) for servers.
func checkLive(servers []Server, live []bool) error {
	if live != nil && len(live) != len(servers) {
		return fmt.Errorf("%w: %d flags for %d servers", ErrLiveView, len(live), len(servers))
	}
	return nil
}

func isLive(live []bool, i int) bool { return live == nil || live[i] }

// ParseServer parses a nutcracker.yml servers entry,
// "host:port:weight [name]" or "/path/unix_socket:weight [name]", the way
// Twemproxy 0.5.0 does: split from the right at the last space (name), then
// colons (weight, port); the host is everything before, so IPv6 literals
// are not supported (nor are they by nutcracker). Weight must be positive.
// Errors are ErrKetamaConfig.
func ParseServer(s string) (Server, error) {
	bad := func(why string) (Server, error) {
		return Server{}, fmt.Errorf("%w: server %q: %s", ErrKetamaConfig, s, why)
	}
	rest, name := s, ""
	if i := strings.LastIndexByte(rest, ' '); i >= 0 {
		rest, name = rest[:i], rest[i+1:]
		if name == "" {
			return bad("empty name")
		}
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return bad(`want "host:port:weight [name]"`)
	}
	addr, weightStr := rest[:i], rest[i+1:]
	w, ok := digits(weightStr)
	if !ok {
		return bad("invalid weight")
	}
	if w == 0 {
		return bad("zero weight")
	}
	if !strings.HasPrefix(addr, "/") {
		j := strings.LastIndexByte(addr, ':')
		if j <= 0 {
			return bad(`want "host:port:weight [name]"`)
		}
		p, ok := digits(addr[j+1:])
		if !ok || p <= 0 || p > 65535 {
			return bad("invalid port")
		}
	}
	return Server{Addr: addr, Weight: w, Name: name}, nil
}

// digits parses a non-empty run of ASCII digits (no sign, as nc_atoi), up
// to 9 of them.
func digits(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}
