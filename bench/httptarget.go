package bench

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// HTTPTarget sends requests to edge workers. A client presents its ID in
// X-User-ID (the api route counts per user) and a stable fake address in
// X-Forwarded-For (the login route counts per IP; 127.0.0.1 is a trusted
// proxy in the policy PolicyYAML writes).
type HTTPTarget struct {
	URLs   []string     // the edges' base URLs; worker i sends to URLs[i mod len]
	Client *http.Client // required
}

// NewHTTPTarget returns a target over the edges' base URLs with up to
// conns connections per edge.
func NewHTTPTarget(urls []string, conns int) *HTTPTarget {
	tr := &http.Transport{
		MaxIdleConns:        conns * len(urls),
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}
	return &HTTPTarget{URLs: urls, Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// Workers implements Target.
func (h *HTTPTarget) Workers() int { return len(h.URLs) }

// ClientIP returns the fake address of a client: 10.x.y.z from its ID.
func clientIP(id string) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(id))
	v := f.Sum32()
	return fmt.Sprintf("10.%d.%d.%d", v>>16&0xff, v>>8&0xff, v&0xff|1)
}

// Do implements Target.
func (h *HTTPTarget) Do(ctx context.Context, worker int, c *Client, r *Route) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URLs[worker%len(h.URLs)]+r.Path, nil)
	if err != nil {
		return Failed
	}
	req.Header.Set("X-User-ID", c.ID)
	req.Header.Set("X-Forwarded-For", clientIP(c.ID))
	resp, err := h.Client.Do(req)
	if err != nil {
		return Failed
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return Admitted
	case resp.StatusCode == http.StatusTooManyRequests:
		return Rejected
	case resp.StatusCode == http.StatusServiceUnavailable:
		return Unavailable
	}
	return Failed
}

// Close releases idle connections.
func (h *HTTPTarget) Close() { h.Client.CloseIdleConnections() }

func policyAlgorithm(a counter.Algorithm) string {
	switch a {
	case counter.FixedWindow:
		return "fixed_window"
	case counter.TokenBucket:
		return "token_bucket"
	}
	return "sliding_window"
}

// PolicyYAML writes the edge policy for routes (see the pop package's
// format): one policy per route, GET on the route's path, counted per user
// (X-User-ID) on fail-open routes and per client IP on fail-closed ones,
// with algorithm alg.
func PolicyYAML(routes []Route, alg counter.Algorithm, precision int) []byte {
	var b strings.Builder
	b.WriteString("# written by popbench\nversion: 1\nheaders: seed\ntrusted_proxies: [127.0.0.1/32]\n")
	b.WriteString("api_key:\n  header: X-API-Key\nuser_header: X-User-ID\ntiers:\n")
	name := func(r Route) string { return strings.Trim(strings.ReplaceAll(r.Path, "/", "_"), "_") }
	for _, r := range routes {
		fmt.Fprintf(&b, "  %s:\n    limits:\n      - name: %s\n        algorithm: %s\n        quantity: %d\n        window: %s\n",
			name(r), name(r), policyAlgorithm(alg), r.Quantity, r.Window)
		if precision > 1 && alg == counter.SlidingWindow {
			fmt.Fprintf(&b, "        precision: %d\n", precision)
		}
		if r.Refund {
			b.WriteString("        on_reject: refund\n")
		}
	}
	b.WriteString("policies:\n")
	for _, r := range routes {
		identity, mode := "user", "open"
		if r.FailClosed {
			identity, mode = "ip", "closed"
		}
		fmt.Fprintf(&b, "  - name: %s\n    routes: [\"GET %s\"]\n    identity: [%s]\n    tier: %s\n    fail_mode: %s\n",
			name(r), r.Path, identity, name(r), mode)
	}
	return []byte(b.String())
}

// ServerStats reads the "stats" of a memcached-protocol address.
func serverStats(addr string, timeout time.Duration) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		return nil, err
	}
	out := map[string]string{}
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "END" {
			return out, nil
		}
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		} else if len(f) > 0 && f[0] != "STAT" {
			return nil, fmt.Errorf("bench: stats from %s: %q", addr, line)
		}
	}
}

// StoreCommands is the number of data commands a memcached-compatible
// server has executed, from its stats. mcproxy counts command lines
// (cmd_get, cmd_add, cmd_incr, …: one per round trip); memcached counts
// retrievals per key (a multi-get counts once per key) plus storage,
// incr/decr, cas and touch commands.
func storeCommandsOf(st map[string]string) int64 {
	var n int64
	if _, ok := st["cmd_incr"]; ok { // mcproxy
		for k, v := range st {
			switch k {
			case "cmd_stats", "cmd_version", "cmd_quit", "cmd_flush_all", "cmd_verbosity":
				continue
			}
			if strings.HasPrefix(k, "cmd_") {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
		return n
	}
	for _, k := range []string{"cmd_get", "cmd_set", "cmd_touch", "incr_hits", "incr_misses",
		"decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval"} {
		v, _ := strconv.ParseInt(st[k], 10, 64)
		n += v
	}
	return n
}
