package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/proxy/yamlpos"
	"github.com/poplimit/poplimit/shard"
)

// ErrConfig reports a configuration the proxy cannot run.
var ErrConfig = errors.New("proxy: bad config")

// DefaultListen is the default listen address: loopback only, on a port
// no Twemproxy (22121), memcached (11211) or Prometheus exporter default
// takes, so mcproxy can run beside them.
const DefaultListen = "127.0.0.1:7411"

// PoolSpec is one Twemproxy pool: a listen address and its shards. The
// zero values of optional fields mean Twemproxy's defaults, except two:
// Timeout (Twemproxy waits forever by default, the proxy 1s) and
// Distribution ("" means consistent hashing, not Twemproxy's ketama; only
// ParseConfig fills in ketama for a pool that does not name one).
type PoolSpec struct {
	// Name is the pool's name (the YAML key).
	Name string
	// Listen is "host:port", or a Unix socket "/path/mc.sock [mode]" (see
	// ParseListen); default DefaultListen.
	Listen string
	// Hash is the ketama/modula hash (fnv1a_64 default, md5, murmur, ...);
	// it is ignored by the consistent distribution, which always uses
	// xxhash, and by random, which hashes nothing.
	Hash string
	// Distribution is one of Twemproxy's "ketama", "modula" or "random"
	// (same placement as nutcracker: shard.Ketama, shard.Modula,
	// shard.Random; with random, a get may miss what a set of the same key
	// wrote), or "consistent" (xxhash, buraksezer/consistent). The zero
	// value "" means "consistent", as in shard.MembershipConfig.
	// ParseConfig sets "ketama" (Twemproxy's default) when a pool's YAML
	// omits distribution, and rejects a name outside these four, as
	// nutcracker does.
	Distribution string
	// HashTag is the two-character hash tag; "" hashes whole keys.
	HashTag string
	// Timeout bounds each request and connect; default 1s.
	Timeout time.Duration
	// ServerConnections per shard; default 1.
	ServerConnections int
	// AutoEjectHosts, ServerRetryTimeout (default 30s) and
	// ServerFailureLimit (default 2) are Twemproxy's ejection policy.
	AutoEjectHosts     bool
	ServerRetryTimeout time.Duration
	ServerFailureLimit int
	// Servers are the shards in config order.
	Servers []shard.Server
	// ClientConnections bounds concurrent clients (Twemproxy's
	// client_connections); 0 means no limit.
	ClientConnections int
	// ClientTimeout closes idle clients (YAML client_timeout in ms, an
	// mcproxy extension nutcracker rejects); 0 means never.
	ClientTimeout time.Duration
}

// conflicts reports whether p and q would listen on the same address
// (port 0, "any free port", never conflicts).
func (p PoolSpec) conflicts(q PoolSpec) bool {
	return listenKey(p.listen()) == listenKey(q.listen()) && !strings.HasSuffix(p.listen(), ":0")
}

// sameRouting reports whether p and q route and reach shards identically
// (everything but Name, Listen and the client limits), so a reload can
// keep p's Router.
func (p PoolSpec) sameRouting(q PoolSpec) bool {
	return p.Hash == q.Hash && p.Distribution == q.Distribution &&
		p.HashTag == q.HashTag && p.Timeout == q.Timeout &&
		p.ServerConnections == q.ServerConnections &&
		p.AutoEjectHosts == q.AutoEjectHosts &&
		p.ServerRetryTimeout == q.ServerRetryTimeout &&
		p.ServerFailureLimit == q.ServerFailureLimit &&
		slices.Equal(p.Servers, q.Servers)
}

// Validate checks the spec.
func (p PoolSpec) Validate() error {
	if len(p.Servers) == 0 {
		return fmt.Errorf("%w: pool %q has no servers", ErrConfig, p.Name)
	}
	if _, err := shard.ParseHashTag(p.HashTag); err != nil {
		return fmt.Errorf("%w: pool %q: %w", ErrConfig, p.Name, err)
	}
	switch p.Distribution {
	case "", shard.DistKetama, shard.DistModula, shard.DistRandom, shard.DistConsistent:
	default:
		return fmt.Errorf("%w: pool %q: distribution %q", ErrConfig, p.Name, p.Distribution)
	}
	if _, _, _, err := ParseListen(p.listen()); err != nil {
		return fmt.Errorf("pool %q: %w", p.Name, err) // err wraps ErrConfig
	}
	if p.ClientConnections < 0 || p.ServerConnections < 0 || p.ServerFailureLimit < 0 {
		return fmt.Errorf("%w: pool %q: negative connection count or failure limit", ErrConfig, p.Name)
	}
	return nil
}

func (p PoolSpec) listen() string {
	if p.Listen != "" {
		return p.Listen
	}
	return DefaultListen
}

// ListenAddr returns the address to listen on.
func (p PoolSpec) ListenAddr() string { return p.listen() }

// RouterConfig returns the RouterConfig for the pool (without Logger or
// NewBackend).
func (p PoolSpec) RouterConfig() RouterConfig {
	tag, _ := shard.ParseHashTag(p.HashTag)
	return RouterConfig{
		Servers:      p.Servers,
		Distribution: p.Distribution,
		Hash:         p.Hash,
		HashTag:      tag,
		Health: shard.HealthConfig{
			AutoEject:    p.AutoEjectHosts,
			FailureLimit: p.ServerFailureLimit,
			RetryTimeout: p.ServerRetryTimeout,
		},
		Pool: PoolConfig{Connections: p.ServerConnections, Timeout: p.Timeout},
	}
}

// ParseConfig parses a Twemproxy (nutcracker.yml) file: a mapping of pool
// name to pool. Supported keys: listen (host:port or "/path.sock [mode]"),
// hash, distribution (ketama, modula, random, or mcproxy's consistent), hash_tag, timeout, server_connections,
// client_connections, auto_eject_hosts, server_retry_timeout,
// server_failure_limit, servers, and client_timeout (ms, an mcproxy
// extension). Pool names must be unique, and so must listen addresses. A
// key the proxy does not support is logged as a warning to log (nil:
// slog.Default()) and otherwise ignored; "redis: true", an unknown hash
// and an unknown distribution are errors. Pools come back in file order.
func ParseConfig(data []byte, log *slog.Logger) ([]PoolSpec, error) {
	if log == nil {
		log = slog.Default()
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: line %d: %s", ErrConfig, yamlpos.Line(data, err), yamlpos.Reason(err))
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: want a mapping of pool names to pools", ErrConfig)
	}
	root := doc.Content[0]
	var pools []PoolSpec
	for i := 0; i+1 < len(root.Content); i += 2 {
		name := root.Content[i].Value
		body := root.Content[i+1]
		if body.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%w: pool %q: want a mapping", ErrConfig, name)
		}
		p := PoolSpec{Name: name, Distribution: shard.DistKetama}
		for j := 0; j+1 < len(body.Content); j += 2 {
			key, val := body.Content[j].Value, body.Content[j+1]
			if err := p.set(key, val, log); err != nil {
				return nil, fmt.Errorf("%w: pool %q: %s (line %d): %w", ErrConfig, name, key, val.Line, err)
			}
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		for _, q := range pools {
			if q.Name == p.Name {
				return nil, fmt.Errorf("%w: pool %q defined twice (line %d)", ErrConfig, name, root.Content[i].Line)
			}
			if q.conflicts(p) {
				return nil, fmt.Errorf("%w: pools %q and %q both listen on %q", ErrConfig, q.Name, name, p.listen())
			}
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%w: no pools", ErrConfig)
	}
	return pools, nil
}

func (p *PoolSpec) set(key string, val *yaml.Node, log *slog.Logger) error {
	ms := func() (time.Duration, error) {
		n, err := strconv.Atoi(val.Value)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want milliseconds, got %q", val.Value)
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	var err error
	switch key {
	case "listen":
		p.Listen = val.Value
	case "hash":
		p.Hash = val.Value
		if _, herr := shard.KetamaHash(val.Value); herr != nil {
			return herr
		}
	case "distribution":
		switch val.Value {
		case shard.DistKetama, shard.DistModula, shard.DistRandom, shard.DistConsistent:
			p.Distribution = val.Value
		default:
			return fmt.Errorf("%q is not a valid distribution (ketama, modula, random or consistent)", val.Value)
		}
	case "hash_tag":
		p.HashTag = val.Value
	case "timeout":
		p.Timeout, err = ms()
	case "server_retry_timeout":
		p.ServerRetryTimeout, err = ms()
	case "server_connections":
		p.ServerConnections, err = strconv.Atoi(val.Value)
	case "client_connections":
		p.ClientConnections, err = strconv.Atoi(val.Value)
	case "client_timeout":
		p.ClientTimeout, err = ms()
	case "server_failure_limit":
		p.ServerFailureLimit, err = strconv.Atoi(val.Value)
	case "auto_eject_hosts":
		p.AutoEjectHosts, err = strconv.ParseBool(val.Value)
	case "redis":
		if b, _ := strconv.ParseBool(val.Value); b {
			return errors.New("redis pools are not supported")
		}
	case "servers":
		if val.Kind != yaml.SequenceNode {
			return errors.New("want a list")
		}
		for _, s := range val.Content {
			sv, serr := shard.ParseServer(s.Value)
			if serr != nil {
				return serr
			}
			p.Servers = append(p.Servers, sv)
		}
	default:
		log.Warn("mcproxy: config key not supported, ignored", "pool", p.Name, "key", key, "value", val.Value, "line", val.Line)
	}
	return err
}
