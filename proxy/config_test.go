package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/shard"
)

// parseConfigLogged parses a config that must be valid and returns the
// pools and what ParseConfig logged.
func parseConfigLogged(t *testing.T, data []byte) ([]PoolSpec, string) {
	t.Helper()
	var logs bytes.Buffer
	pools, err := ParseConfig(data, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return pools, logs.String()
}

// parseConfigFile is parseConfigLogged on a file.
func parseConfigFile(t *testing.T, path string) ([]PoolSpec, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseConfigLogged(t, data)
}

func TestParseConfigNutcracker(t *testing.T) {
	pools, logs := parseConfigFile(t, "../testdata/mcproxy.yml")
	if logs != "" {
		t.Errorf("warnings for a fully supported file: %s", logs)
	}
	if len(pools) != 1 {
		t.Fatalf("%d pools", len(pools))
	}
	p := pools[0]
	want := PoolSpec{
		Name: "alpha", Listen: "127.0.0.1:7411", Hash: "fnv1a_64", Distribution: shard.DistKetama,
		HashTag: "{}", Timeout: 400 * time.Millisecond, ServerConnections: 1, AutoEjectHosts: true,
		ServerRetryTimeout: 2 * time.Second, ServerFailureLimit: 2,
		Servers: []shard.Server{
			{Addr: "127.0.0.1:11211", Weight: 1, Name: "alpha"},
			{Addr: "127.0.0.1:11212", Weight: 1, Name: "beta"},
			{Addr: "127.0.0.1:11213", Weight: 1, Name: "gamma"},
		},
	}
	if p.Name != want.Name || p.Listen != want.Listen || p.Hash != want.Hash || p.Distribution != want.Distribution ||
		p.HashTag != want.HashTag || p.Timeout != want.Timeout || p.ServerConnections != want.ServerConnections ||
		p.AutoEjectHosts != want.AutoEjectHosts || p.ServerRetryTimeout != want.ServerRetryTimeout ||
		p.ServerFailureLimit != want.ServerFailureLimit || len(p.Servers) != 3 {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	for i := range want.Servers {
		if p.Servers[i] != want.Servers[i] {
			t.Errorf("server %d: %+v, want %+v", i, p.Servers[i], want.Servers[i])
		}
	}
	// Placement equals Twemproxy's: the same ring as shard.Ketama.
	rc := p.RouterConfig()
	m, err := shard.NewMembership(shard.MembershipConfig{Servers: rc.Servers, Distribution: rc.Distribution, Hash: rc.Hash})
	if err != nil {
		t.Fatal(err)
	}
	k, err := shard.NewKetama([]shard.Server{{Addr: "127.0.0.1:11211", Weight: 1, Name: "alpha"}, {Addr: "127.0.0.1:11212", Weight: 1, Name: "beta"}, {Addr: "127.0.0.1:11213", Weight: 1, Name: "gamma"}}, nil, "fnv1a_64")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "rl:{u1}:w1", "k:300", "x"} {
		h := rc.HashTag.Extract([]byte(key))
		if m.Locate(h) != k.Locate(h) {
			t.Errorf("key %q placed differently from ketama", key)
		}
	}
}

func TestParseConfigWarnings(t *testing.T) {
	pools, logs := parseConfigFile(t, "../testdata/mcproxy-consistent.yml")
	if len(pools) != 2 || pools[0].Name != "counters" || pools[1].Name != "sessions" {
		t.Fatalf("pools %+v", pools)
	}
	if pools[0].Distribution != shard.DistConsistent || pools[1].Distribution != shard.DistKetama {
		t.Errorf("distributions %q %q", pools[0].Distribution, pools[1].Distribution)
	}
	for _, key := range []string{"key=preconnect", "key=backlog"} {
		if !strings.Contains(logs, key) || !strings.Contains(logs, "WARN") {
			t.Errorf("no warning for %s in %q", key, logs)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct{ name, yml string }{
		{"not a mapping", "- a\n- b\n"},
		{"no servers", "p:\n  listen: 127.0.0.1:1\n"},
		{"redis", "p:\n  redis: true\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad timeout", "p:\n  timeout: soon\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad server", "p:\n  servers:\n   - nonsense\n"},
		{"bad hash tag", "p:\n  hash_tag: \"{\"\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad hash", "p:\n  hash: sha9\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad distribution", "p:\n  distribution: modulo\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"distribution case", "p:\n  distribution: Modula\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad listen", "p:\n  listen: nowhere\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad socket mode", "p:\n  listen: /tmp/mc.sock 0999\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad client_connections", "p:\n  client_connections: many\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"negative client_connections", "p:\n  client_connections: -1\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"bad client_timeout", "p:\n  client_timeout: -5\n  servers:\n   - 127.0.0.1:1:1\n"},
		{"same listen", "p:\n  listen: 127.0.0.1:7\n  servers:\n   - 127.0.0.1:1:1\nq:\n  listen: 127.0.0.1:7\n  servers:\n   - 127.0.0.1:2:1\n"},
		{"same name", "p:\n  listen: 127.0.0.1:7\n  servers:\n   - 127.0.0.1:1:1\np:\n  listen: 127.0.0.1:8\n  servers:\n   - 127.0.0.1:2:1\n"},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yml), slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
			if !errors.Is(err, ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
		})
	}
}

// TestParseConfigOperations: Unix socket listen, client_connections and
// client_timeout, several pools in file order.
func TestParseConfigOperations(t *testing.T) {
	yml := `web:
  listen: /run/mcproxy/web.sock 0666
  client_connections: 100
  client_timeout: 30000
  servers:
   - 127.0.0.1:11211:1
api:
  listen: 127.0.0.1:22122
  servers:
   - 127.0.0.1:11212:1
`
	pools, logs := parseConfigLogged(t, []byte(yml))
	if logs != "" {
		t.Errorf("warnings: %s", logs)
	}
	if len(pools) != 2 || pools[0].Name != "web" || pools[1].Name != "api" {
		t.Fatalf("pools %+v", pools)
	}
	w := pools[0]
	if w.Listen != "/run/mcproxy/web.sock 0666" || w.ClientConnections != 100 || w.ClientTimeout != 30*time.Second {
		t.Errorf("web = %+v", w)
	}
	if pools[1].ClientConnections != 0 || pools[1].ClientTimeout != 0 {
		t.Errorf("api limits %+v, want none", pools[1])
	}
}

func TestPoolSpecSameRouting(t *testing.T) {
	base := PoolSpec{Name: "p", Listen: "127.0.0.1:1", Distribution: shard.DistKetama,
		Servers: []shard.Server{{Addr: "a:1"}, {Addr: "b:1"}}}
	tests := []struct {
		name string
		edit func(*PoolSpec)
		same bool
	}{
		{"identical", func(*PoolSpec) {}, true},
		{"client limits", func(p *PoolSpec) { p.ClientConnections, p.ClientTimeout = 5, time.Second }, true},
		{"listen", func(p *PoolSpec) { p.Listen = "127.0.0.1:2" }, true},
		{"server added", func(p *PoolSpec) { p.Servers = append(p.Servers, shard.Server{Addr: "c:1"}) }, false},
		{"server weight", func(p *PoolSpec) { p.Servers = []shard.Server{{Addr: "a:1", Weight: 2}, {Addr: "b:1"}} }, false},
		{"timeout", func(p *PoolSpec) { p.Timeout = time.Second }, false},
		{"hash", func(p *PoolSpec) { p.Hash = "md5" }, false},
		{"distribution", func(p *PoolSpec) { p.Distribution = shard.DistModula }, false},
		{"eject", func(p *PoolSpec) { p.AutoEjectHosts = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := base
			q.Servers = append([]shard.Server(nil), base.Servers...)
			tt.edit(&q)
			if got := base.sameRouting(q); got != tt.same {
				t.Errorf("sameRouting = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestParseConfigOpsExample(t *testing.T) {
	pools, logs := parseConfigFile(t, "../testdata/mcproxy-ops.yml")
	if logs != "" {
		t.Errorf("warnings: %s", logs)
	}
	if len(pools) != 2 || pools[0].Listen != "/tmp/mcproxy-counters.sock 0666" || pools[0].ClientConnections != 4096 ||
		pools[0].ClientTimeout != 300*time.Second || pools[1].Name != "sessions" {
		t.Fatalf("pools %+v", pools)
	}
}

// TestParseConfigDistributions: every Twemproxy distribution (and mcproxy's
// consistent) is kept as written, without a warning; a missing one is
// ketama; the pool's Router places keys as the shard type of that name.
func TestParseConfigDistributions(t *testing.T) {
	ks := []shard.Server{{Addr: "127.0.0.1:11211", Weight: 1, Name: "a"},
		{Addr: "127.0.0.1:11212", Weight: 2, Name: "b"}, {Addr: "127.0.0.1:11213", Weight: 1, Name: "c"}}
	tests := []struct {
		name string
		line string // the distribution line, "" for none
		hash string
		want string
		// placement, when deterministic: the Locator the pool must agree with
		ref func() (shard.Locator, error)
	}{
		{"omitted is ketama", "", "md5", shard.DistKetama,
			func() (shard.Locator, error) { return shard.NewKetama(ks, nil, "md5") }},
		{"ketama", "ketama", "fnv1a_64", shard.DistKetama,
			func() (shard.Locator, error) { return shard.NewKetama(ks, nil, "fnv1a_64") }},
		{"modula fnv1a_64", "modula", "fnv1a_64", shard.DistModula,
			func() (shard.Locator, error) { return shard.NewModula(ks, nil, "fnv1a_64") }},
		{"modula md5", "modula", "md5", shard.DistModula,
			func() (shard.Locator, error) { return shard.NewModula(ks, nil, "md5") }},
		{"random", "random", "fnv1a_64", shard.DistRandom, nil},
		{"consistent", "consistent", "", shard.DistConsistent, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			yml := "p:\n  listen: 127.0.0.1:1\n"
			if tc.hash != "" {
				yml += "  hash: " + tc.hash + "\n"
			}
			if tc.line != "" {
				yml += "  distribution: " + tc.line + "\n"
			}
			yml += "  servers:\n   - 127.0.0.1:11211:1 a\n   - 127.0.0.1:11212:2 b\n   - 127.0.0.1:11213:1 c\n"
			pools, logs := parseConfigLogged(t, []byte(yml))
			if logs != "" {
				t.Errorf("warnings: %s", logs)
			}
			p := pools[0]
			if p.Distribution != tc.want {
				t.Fatalf("Distribution = %q, want %q", p.Distribution, tc.want)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			rc := p.RouterConfig()
			m, err := shard.NewMembership(shard.MembershipConfig{Servers: rc.Servers, Distribution: rc.Distribution, Hash: rc.Hash})
			if err != nil {
				t.Fatal(err)
			}
			if tc.ref == nil {
				return
			}
			ref, err := tc.ref()
			if err != nil {
				t.Fatal(err)
			}
			for i := range 500 {
				h := rc.HashTag.Extract([]byte("k:" + strconv.Itoa(i)))
				if m.Locate(h) != ref.Locate(h) {
					t.Fatalf("key %q on shard %d, want %d", h, m.Locate(h), ref.Locate(h))
				}
			}
		})
	}
}

func TestPoolSpecValidateDistribution(t *testing.T) {
	for _, d := range []string{"", shard.DistKetama, shard.DistModula, shard.DistRandom, shard.DistConsistent, "modulo", "RANDOM"} {
		p := PoolSpec{Name: "p", Distribution: d, Servers: []shard.Server{{Addr: "127.0.0.1:1"}}}
		err := p.Validate()
		valid := d != "modulo" && d != "RANDOM"
		if valid && err != nil {
			t.Errorf("%q: %v", d, err)
		}
		if !valid && !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err = %v, want ErrConfig", d, err)
		}
	}
}

// TestParseConfigSyntaxErrorLine: a YAML syntax error names the line it is
// on, not the line its pool began on.
func TestParseConfigSyntaxErrorLine(t *testing.T) {
	doc := "alpha:\n  listen: 127.0.0.1:0\n  hash: fnv1a_64\n timeout: 400\n  servers:\n   - 127.0.0.1:11211:1\n"
	_, err := ParseConfig([]byte(doc), nil)
	if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "line 4: yaml: did not find expected key") {
		t.Fatalf("err %v, want ErrConfig at line 4", err)
	}
}
