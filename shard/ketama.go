package shard

import (
	"crypto/md5"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// ErrKetamaConfig reports a Twemproxy ketama configuration that nutcracker
// itself would reject (no servers, bad weight, bad "host:port:weight [name]").
var ErrKetamaConfig = errors.New("shard: invalid ketama config")

// ErrKetamaHash reports a "hash:" name that Ketama does not implement.
var ErrKetamaHash = errors.New("shard: unsupported ketama hash")

func errKetamaHash(name string) error { return fmt.Errorf("%w %q", ErrKetamaHash, name) }

// Twemproxy 0.5.0 (src/hashkit/nc_ketama.c) constants.
const (
	ketamaPointsPerServer = 160 // points per server at equal weights
	ketamaPointsPerHash   = 4   // one MD5 digest yields four points
	ketamaDefaultPort     = 11211
	ketamaMaxHostLen      = 273 // label buffer, NUL included
)

// KetamaServer is one entry of a Twemproxy pool's "servers:" list.
// The zero Weight means 1.
type KetamaServer struct {
	// Addr is "host:port", or a Unix socket path starting with "/".
	Addr string
	// Weight is the server's relative share of points; default 1.
	Weight int
	// Name is the optional instance name after the weight. When set, it
	// replaces the address in the ketama point labels, so servers can move
	// to another address without moving their keys.
	Name string
	// Ejected leaves the server off the continuum (Twemproxy's view of a
	// server ejected by auto_eject_hosts) while keeping its index. The
	// live servers' shares are recomputed exactly as nutcracker does.
	Ejected bool
}

func (s KetamaServer) weight() int {
	if s.Weight > 0 {
		return s.Weight
	}
	return 1
}

// label is the string Twemproxy hashes for the server's points: the name
// when present; else the host alone when the port is 11211 (libmemcached
// compatibility); else "host:port". For a Unix socket path Twemproxy's
// parser yields "path:" (the empty port keeps its separator).
func (s KetamaServer) label() string {
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

// ParseKetamaServer parses a nutcracker.yml servers entry,
// "host:port:weight [name]" or "/path/unix_socket:weight [name]", the way
// Twemproxy 0.5.0 does: split from the right at the last space (name), then
// colons (weight, port); the host is everything before, so IPv6 literals
// are not supported (nor are they by nutcracker). Weight must be positive.
func ParseKetamaServer(s string) (KetamaServer, error) {
	bad := func(why string) (KetamaServer, error) {
		return KetamaServer{}, fmt.Errorf("%w: server %q: %s", ErrKetamaConfig, s, why)
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
	return KetamaServer{Addr: addr, Weight: w, Name: name}, nil
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

// Ketama places keys on servers exactly as Twemproxy 0.5.0's
// "distribution: ketama" does for the same servers list (order, weights,
// names) and hash, so a pool can move from nutcracker to this proxy with
// every key staying on its shard.
//
// A Ketama is immutable and safe for concurrent use; Locate takes no lock
// and does not allocate. To change membership, build a new one and publish
// it (for instance through an atomic.Pointer).
type Ketama struct {
	n      int
	hash   KetamaHashFunc
	values []uint32 // continuum point values, ascending
	index  []int32  // index[i] is the server owning values[i]
}

// NewKetama builds the continuum for servers, listed in config order, with
// the named hash (see KetamaHash; "" is fnv1a_64). Each live server gets
// floor(weight/total*40*live)*4 points (160 at equal weights), four per MD5
// digest of "label-i". Points that collide keep config order, as glibc's
// stable qsort leaves them. With every server ejected, Locate returns -1.
func NewKetama(servers []KetamaServer, hash string) (*Ketama, error) {
	h, err := KetamaHash(hash)
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrKetamaConfig)
	}
	var total, live int
	for i, s := range servers {
		if s.Weight < 0 {
			return nil, fmt.Errorf("%w: server %d: negative weight", ErrKetamaConfig, i)
		}
		if !s.Ejected {
			total += s.weight()
			live++
		}
	}
	k := &Ketama{n: len(servers), hash: h}
	type point struct {
		value  uint32
		server int32
	}
	var pts []point
	label := make([]byte, 0, ketamaMaxHostLen)
	for i, s := range servers {
		if s.Ejected {
			continue
		}
		// Reproduce nutcracker's single-precision arithmetic step by step;
		// the explicit conversions forbid fused multiply-adds.
		pct := float32(s.weight()) / float32(total)
		x := float32(pct * float32(ketamaPointsPerServer))
		x = float32(x / float32(ketamaPointsPerHash))
		x = float32(x * float32(live))
		x = float32(float64(x) + 0.0000000001)
		perServer := int(math.Floor(float64(x))) * ketamaPointsPerHash
		for p := 0; p < perServer/ketamaPointsPerHash; p++ {
			label = append(label[:0], s.label()...)
			label = append(label, '-')
			label = strconv.AppendUint(label, uint64(p), 10)
			if len(label) > ketamaMaxHostLen-1 {
				label = label[:ketamaMaxHostLen-1]
			}
			d := md5.Sum(label)
			for w := 0; w < ketamaPointsPerHash; w++ {
				pts = append(pts, point{md5Word(&d, w), int32(i)})
			}
		}
	}
	slices.SortStableFunc(pts, func(a, b point) int {
		switch {
		case a.value < b.value:
			return -1
		case a.value > b.value:
			return 1
		}
		return 0
	})
	k.values = make([]uint32, len(pts))
	k.index = make([]int32, len(pts))
	for i, p := range pts {
		k.values[i], k.index[i] = p.value, p.server
	}
	return k, nil
}

// Len is the number of servers, live or ejected.
func (k *Ketama) Len() int { return k.n }

// Points is the number of points on the continuum.
func (k *Ketama) Points() int { return len(k.values) }

// Locate returns the index, in config order, of the server that owns key:
// the first point at or after the key's hash, wrapping to the first point.
// The key is hashed whole; apply the pool's hash tag first
// (HashTag.Extract has Twemproxy's rule). As in Twemproxy, a one-server pool skips hashing and the
// empty key hashes to 0. It returns -1 when every server is ejected.
func (k *Ketama) Locate(key []byte) int {
	if k.n == 1 && len(k.values) > 0 {
		return 0
	}
	if len(k.values) == 0 {
		return -1
	}
	var h uint32
	if len(key) > 0 {
		h = k.hash(key)
	}
	// Lower bound over values, hand-written to stay inlined and branch-light.
	lo, hi := 0, len(k.values)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if k.values[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(k.values) {
		lo = 0
	}
	return int(k.index[lo])
}
