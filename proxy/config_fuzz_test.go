package proxy

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// encodeConfig writes pools back as a Twemproxy YAML document that
// ParseConfig reads as the same pools (fields at their zero value are
// left out; distribution is always written).
func encodeConfig(t *testing.T, pools []PoolSpec) []byte {
	t.Helper()
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range pools {
		body := &yaml.Node{Kind: yaml.MappingNode}
		add := func(k, v string) { body.Content = append(body.Content, str(k), str(v)) }
		ms := func(k string, d time.Duration) {
			if d != 0 {
				add(k, strconv.FormatInt(d.Milliseconds(), 10))
			}
		}
		num := func(k string, n int) {
			if n != 0 {
				add(k, strconv.Itoa(n))
			}
		}
		if p.Listen != "" {
			add("listen", p.Listen)
		}
		if p.Hash != "" {
			add("hash", p.Hash)
		}
		add("distribution", p.Distribution)
		if p.HashTag != "" {
			add("hash_tag", p.HashTag)
		}
		ms("timeout", p.Timeout)
		ms("server_retry_timeout", p.ServerRetryTimeout)
		ms("client_timeout", p.ClientTimeout)
		num("server_connections", p.ServerConnections)
		num("client_connections", p.ClientConnections)
		num("server_failure_limit", p.ServerFailureLimit)
		if p.AutoEjectHosts {
			add("auto_eject_hosts", "true")
		}
		servers := &yaml.Node{Kind: yaml.SequenceNode}
		for _, s := range p.Servers {
			v := s.Addr + ":" + strconv.Itoa(s.Weight)
			if s.Name != "" {
				v += " " + s.Name
			}
			servers.Content = append(servers.Content, str(v))
		}
		body.Content = append(body.Content, str("servers"), servers)
		root.Content = append(root.Content, str(p.Name), body)
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	if err != nil {
		t.Fatalf("encode %+v: %v", pools, err)
	}
	return out
}

// FuzzParseConfig: ParseConfig never panics, fails only with ErrConfig,
// returns pools that validate with unique names and listen addresses, and
// the pools written back as YAML parse to the same pools.
func FuzzParseConfig(f *testing.F) {
	for _, pat := range []string{"../testdata/*.yml", "../testdata/nutcracker/*.yml"} {
		files, _ := filepath.Glob(pat)
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("a:\n  listen: /tmp/mc.sock 0600\n  servers: [/tmp/s.sock:2 one, '127.0.0.1:1:1']\nb:\n  listen: 127.0.0.1:0\n  distribution: modula\n  servers: ['h:2:3']\n"))
	f.Add([]byte("x: {servers: ['a b:1:1 c'], hash_tag: '{}', client_timeout: 5, redis: false, unknown: 1}"))
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, data []byte) {
		pools, err := ParseConfig(data, log)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		for i, p := range pools {
			if err := p.Validate(); err != nil {
				t.Fatalf("pool %q accepted but invalid: %v", p.Name, err)
			}
			for _, q := range pools[:i] {
				if q.Name == p.Name || q.conflicts(p) {
					t.Fatalf("pools %q and %q clash", q.Name, p.Name)
				}
			}
		}
		again, err := ParseConfig(encodeConfig(t, pools), log)
		if err != nil || !reflect.DeepEqual(again, pools) {
			t.Fatalf("round trip of %q:\n%+v\n%v\n%+v", data, pools, err, again)
		}
	})
}
