package pop

// Step 2, the route: the canonical path of a request and the policy route
// it matches, memoised per snapshot.

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
)

// NormalizePath returns the canonical spelling of an escaped URL path (as
// url.URL.EscapedPath gives it), the one requests are matched by and
// forwarded with, so that spellings an upstream reads as one path match one
// route:
//
//   - percent-encoded unreserved characters (RFC 3986: letters, digits,
//     '-', '.', '_', '~') are decoded, and every other escape is written
//     with upper-case hex ("%2f" → "%2F": an encoded '/' stays inside its
//     segment); a '%' that starts no valid escape becomes "%25";
//   - empty segments ("//") and "." segments are dropped, ".." removes the
//     segment before it (never above the root), after decoding (so "%2e%2e"
//     is "..");
//   - a trailing slash is dropped ("/api/widgets/" → "/api/widgets"; "/"
//     stays "/");
//   - with foldCase, letters are lower-cased (escapes keep upper-case hex).
//
// The result always starts with '/', and NormalizePath(NormalizePath(p)) ==
// NormalizePath(p). A path already canonical is returned as is, without
// allocating.
func NormalizePath(p string, foldCase bool) string {
	if isNormalPath(p, foldCase) {
		return p
	}
	out := make([]byte, 0, len(p)+1)
	var starts []int // offset in out of each segment's '/', for ".."
	seg := make([]byte, 0, 32)
	for i := 0; i <= len(p); {
		j := strings.IndexByte(p[i:], '/')
		if j < 0 {
			j = len(p)
		} else {
			j += i
		}
		seg = appendSegment(seg[:0], p[i:j], foldCase)
		i = j + 1
		switch string(seg) {
		case "", ".":
		case "..":
			if n := len(starts); n > 0 {
				out = out[:starts[n-1]]
				starts = starts[:n-1]
			}
		default:
			starts = append(starts, len(out))
			out = append(out, '/')
			out = append(out, seg...)
		}
	}
	if len(out) == 0 {
		return "/"
	}
	return string(out)
}

// appendSegment appends the canonical form of one raw path segment.
func appendSegment(dst []byte, s string, foldCase bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
				d := unhex(s[i+1])<<4 | unhex(s[i+2])
				if unreserved(d) {
					c = d // decoded, then folded below
					i += 2
				} else {
					dst = append(dst, '%', upperHex(s[i+1]), upperHex(s[i+2]))
					i += 2
					continue
				}
			} else {
				dst = append(dst, "%25"...)
				continue
			}
		}
		if foldCase && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// isNormalPath reports whether NormalizePath(p, foldCase) == p, scanning
// once.
func isNormalPath(p string, foldCase bool) bool {
	if p == "/" {
		return true
	}
	if p == "" || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			switch {
			case c == '%':
				if i+2 >= len(p) || !ishex(p[i+1]) || !ishex(p[i+2]) ||
					unreserved(unhex(p[i+1])<<4|unhex(p[i+2])) || isLowerHex(p[i+1]) || isLowerHex(p[i+2]) {
					return false
				}
				i += 2
				continue
			case foldCase && c >= 'A' && c <= 'Z':
				return false
			case c != '/':
				continue
			}
		}
		switch p[segStart:i] {
		case "", ".", "..":
			return false
		}
		segStart = i + 1
	}
	return true
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isLowerHex(c byte) bool { return c >= 'a' && c <= 'f' }

func upperHex(c byte) byte {
	if isLowerHex(c) {
		return c - ('a' - 'A')
	}
	return c
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// unmatchedRoute is the Identity.Route of a request decided by the default
// policy (no route matched).
const unmatchedRoute = "(unmatched)"

// routeCacheEntries bounds a snapshot's route cache.
const routeCacheEntries = 4096

// routeCache memoises route matches by everything the match reads of a
// request (method, host, path), because normalising and matching
// allocate. Bounded: once full, new (method, host, path) triples are
// matched every time (so a scan of random paths cannot grow memory, and
// cannot evict the routes cached before it).
type routeCache struct {
	mu sync.RWMutex
	m  map[routeKey]routeMatch
	n  atomic.Int64 // len(m), readable without the lock
}

type routeKey struct{ method, host, path, rawPath string }

// routeMatch is the answer for one request spelling.
type routeMatch struct {
	pattern string // ServeMux pattern matched, "" for none
	// path is the canonical escaped path (NormalizePath), plus a trailing
	// slash when only that form matched a route: what is matched is what
	// is forwarded.
	path string
}

// route is the ServeMux pattern r matches ("" for none) and the path that
// matched.
func (s *snapshot) route(r *http.Request) routeMatch {
	if r.URL == nil {
		_, pat := s.mux.Handler(r)
		return routeMatch{pattern: s.known(pat)}
	}
	k := routeKey{r.Method, r.Host, r.URL.Path, r.URL.RawPath}
	s.rc.mu.RLock()
	m, ok := s.rc.m[k]
	s.rc.mu.RUnlock()
	if ok {
		return m
	}
	m = s.match(r)
	if s.rc.n.Load() < routeCacheEntries {
		s.rc.mu.Lock()
		if s.rc.m == nil {
			s.rc.m = make(map[routeKey]routeMatch)
		}
		if len(s.rc.m) < routeCacheEntries {
			s.rc.m[k] = m
			s.rc.n.Store(int64(len(s.rc.m)))
		}
		s.rc.mu.Unlock()
	}
	return m
}

// match normalises r's path and asks the mux; when nothing matches, the
// path with a trailing slash is tried too (so a subtree pattern "/files/"
// still matches "/files/").
func (s *snapshot) match(r *http.Request) routeMatch {
	if r.Method == http.MethodConnect || r.URL.Path == "*" {
		_, pat := s.mux.Handler(r)
		return routeMatch{pattern: s.known(pat), path: r.URL.EscapedPath()}
	}
	norm := NormalizePath(r.URL.EscapedPath(), s.file.CaseInsensitivePaths)
	if pat := s.matchPath(r, norm); pat != "" || norm == "/" {
		return routeMatch{pattern: pat, path: norm}
	}
	if pat := s.matchPath(r, norm+"/"); pat != "" {
		return routeMatch{pattern: pat, path: norm + "/"}
	}
	return routeMatch{path: norm}
}

func (s *snapshot) matchPath(r *http.Request, escaped string) string {
	u := url.URL{Path: escaped}
	if p, err := url.PathUnescape(escaped); err == nil {
		u.Path, u.RawPath = p, escaped
	}
	nr := &http.Request{Method: r.Method, Host: r.Host, URL: &u}
	_, pat := s.mux.Handler(nr)
	return s.known(pat)
}

// known is pat when it is one of the snapshot's route patterns ("" for the
// mux's redirects, which return a path).
func (s *snapshot) known(pat string) string {
	if _, ok := s.routes[pat]; ok {
		return pat
	}
	return ""
}

// Normalize returns r with its path in the canonical form it is matched by
// (NormalizePath, with the policy file's case_insensitive_paths), so that
// what an upstream receives is what was limited. r itself is returned when
// its path is already canonical (or no policy is loaded); otherwise a
// shallow copy with a new URL.
func (l *Limiter) Normalize(r *http.Request) *http.Request {
	s := l.snap.Load()
	if s == nil || r.URL == nil {
		return r
	}
	m := s.route(r)
	if m.path == "" || m.path == r.URL.EscapedPath() {
		return r
	}
	u := *r.URL
	u.RawPath = m.path
	if p, err := url.PathUnescape(m.path); err == nil {
		u.Path = p
	}
	if u.EscapedPath() == m.path && u.Path == m.path {
		u.RawPath = ""
	}
	nr := new(http.Request)
	*nr = *r
	nr.URL = &u
	return nr
}
