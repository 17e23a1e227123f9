package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// proxyConfigPath is the Twemproxy YAML file mcproxy i reads when the PoP
// has a ProxyPool.
func (p *PoP) proxyConfigPath(i int) string {
	return filepath.Join(p.Config.Dir, fmt.Sprintf("%s-mcproxy-%d.yml", p.Config.Name, i))
}

// writeProxyConfig writes mcproxy i's pool: listen, ProxyPool's lines and
// every current shard, atomically (a reload never reads half a file).
func (p *PoP) writeProxyConfig(i int, listen string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n  listen: %s\n", p.Config.Name, listen)
	for _, l := range strings.Split(strings.TrimSpace(p.Config.ProxyPool), "\n") {
		fmt.Fprintf(&b, "  %s\n", strings.TrimSpace(l))
	}
	b.WriteString("  servers:\n")
	for k, s := range p.Shards {
		fmt.Fprintf(&b, "   - %s:1 shard%d\n", s.Addr, k)
	}
	path := p.proxyConfigPath(i)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("bench: mcproxy config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("bench: mcproxy config: %w", err)
	}
	return nil
}

// reloadProxies rewrites every mcproxy's pool with the current shards and
// sends it SIGHUP.
func (p *PoP) reloadProxies() error {
	if p.Config.ProxyPool == "" {
		return fmt.Errorf("bench: PoP %s: mcproxy has no config file (PoPConfig.ProxyPool)", p.Config.Name)
	}
	for i, pr := range p.Proxies {
		if err := p.writeProxyConfig(i, pr.Addr); err != nil {
			return err
		}
		if err := syscall.Kill(pr.Pid(), syscall.SIGHUP); err != nil {
			return fmt.Errorf("bench: reload mcproxy-%d: %w", i, err)
		}
	}
	return nil
}

// AddShard starts one more shard and reloads every mcproxy with it: a
// part of the keys (a quarter of them, from three shards to four) moves
// to the new, empty shard, whose counts start from zero.
func (p *PoP) AddShard(ctx context.Context) (*shardProc, error) {
	s, err := p.startShard(ctx, len(p.Shards))
	if err != nil {
		return nil, err
	}
	return s, p.reloadProxies()
}

// RemoveShard takes the last shard out of every mcproxy's pool and stops
// it once the proxies have drained it: a reload keeps the requests already
// sent to the old shard set, which mcproxy closes when they are answered
// (and none came for its drain quiet period). With a relay in front of the
// shard, RemoveShard waits until the relay holds no connection (mcproxy
// closed its own), at most drain; without one, it waits drain. Its keys go
// back to the shards they lived on before it was added.
func (p *PoP) RemoveShard(drain time.Duration) error {
	if len(p.Shards) < 2 {
		return fmt.Errorf("bench: PoP %s: cannot remove its only shard", p.Config.Name)
	}
	s := p.Shards[len(p.Shards)-1]
	p.Shards = p.Shards[:len(p.Shards)-1]
	err := p.reloadProxies()
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) && (s.Relay == nil || s.Relay.openConns() > 0) {
		time.Sleep(20 * time.Millisecond)
	}
	if s.Relay != nil {
		_ = s.Relay.Close()
	}
	s.Kill()
	return err
}

// PoPResources are summed over a PoP's mcproxies and edges.
type PoPResources struct {
	// FDs are open file descriptors (/proc/PID/fd).
	FDs int64 `json:"fds"`
	// Tasks are the edges' goroutines (go_goroutines) plus the
	// mcproxies' threads (mcproxy serves no metrics in a bench PoP).
	Tasks int64 `json:"tasks"`
}

// resources reads p's PoPResources; a process that cannot be read (one a
// scenario is restarting) counts as zero.
func (p *PoP) Resources() PoPResources {
	var out PoPResources
	for _, pr := range p.Proxies {
		if r, err := procs.ReadResources(pr.Pid()); err == nil {
			out.FDs += r.FDs
			out.Tasks += r.Threads
		}
	}
	for _, e := range p.Edges {
		if n, err := procs.CountFDs(e.Proc.Pid()); err == nil {
			out.FDs += n
		}
		if m, err := ScrapeMetrics(e.Admin); err == nil {
			out.Tasks += int64(m.Sum("go_goroutines", "", ""))
		}
	}
	return out
}
