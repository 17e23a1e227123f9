package storeflags

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop"
)

// parse runs fn with the cli.Context of args parsed against Flags.
func parse(t *testing.T, args []string, fn func(*cli.Context) error) error {
	t.Helper()
	app := &cli.App{Name: "test", Flags: Flags(), Action: fn}
	return app.Run(append([]string{"test"}, args...))
}

// TestOpen: each client and address count gives its store, and bad values
// are precise errors (edge and rls share these rules).
func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // type name, or an error substring
	}{
		{[]string{"--store-multiplex", "1"}, "*memstore.Store"},
		{[]string{"--memcached", "127.0.0.1:1"}, "*memcached.PipeStore"},
		{[]string{"--memcached", "127.0.0.1:1", "--store-multiplex", "0"}, "*memcached.PipeStore"},
		{[]string{"--memcached", "127.0.0.1:1", "--store-multiplex", "2"}, "*memcached.PipeStore"},
		{[]string{"--store-client", "gomemcache", "--memcached", "127.0.0.1:1"}, "*memcached.Store"},
		{[]string{"--store-client", "gomemcache", "--memcached", "127.0.0.1:1", "--memcached", "127.0.0.1:2"}, "*memcached.Store"},
		{[]string{"--store-client", "gomemcache"}, "*memstore.Store"},
		{[]string{"--memcached", "127.0.0.1:1", "--memcached", "127.0.0.1:2"}, "speaks to one address"},
		{[]string{"--store-client", "redis", "--memcached", "127.0.0.1:1"}, `client "redis"`},
		{[]string{"--store-client", "redis"}, `client "redis"`},
		{[]string{"--memcached", "127.0.0.1:1", "--store-multiplex", "-1"}, "--store-multiplex -1"},
		{[]string{"--store", "redis://nohost"}, "bad store URL"},
	} {
		var got string
		err := parse(t, tc.args, func(c *cli.Context) error {
			cfg, shared, err := Open(c)
			if err != nil {
				return err
			}
			defer shared.Close()
			switch cfg.Store.(type) {
			case *memstore.Store:
				got = "*memstore.Store"
			case *memcached.PipeStore:
				got = "*memcached.PipeStore"
			case *memcached.Store:
				got = "*memcached.Store"
			}
			if cfg.Store != shared.Store() || cfg.NewShared == nil {
				t.Errorf("%v: pop.Config's Store and NewShared are not the built store's", tc.args)
			}
			return nil
		})
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("Open(%v) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

// TestDefaults: the flags' defaults are the daemons' (users' scripts rely
// on them), and the store's socket timeout is the deadline's
// SocketTimeout.
func TestDefaults(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		args      []string
		wantStore store.Config
		wantPop   pop.Config
	}{
		{
			name:      "no flags",
			wantStore: store.Config{Client: store.Pipe, Multiplex: 1, Timeout: time.Second},
			wantPop: pop.Config{
				Deadline:    pop.DeadlineConfig{Floor: 250 * ms, Ceiling: time.Second},
				MaxInFlight: 256,
				Breaker:     pop.BreakerConfig{Failures: 5, Window: 2 * time.Second, OpenFor: 500 * ms},
			},
		},
		{
			name:      "fixed deadline below the ceiling",
			args:      []string{"--store-deadline", "300ms", "--memcached", "127.0.0.1:1", "--store-multiplex", "0"},
			wantStore: store.Config{Memcached: []string{"127.0.0.1:1"}, Client: store.Pipe, Multiplex: -1, Timeout: 300 * ms},
			wantPop: pop.Config{
				Deadline:    pop.DeadlineConfig{Fixed: 300 * ms, Floor: 250 * ms, Ceiling: time.Second},
				MaxInFlight: 256,
				Breaker:     pop.BreakerConfig{Failures: 5, Window: 2 * time.Second, OpenFor: 500 * ms},
			},
		},
		{
			name: "every flag set",
			args: []string{"--store", "redis://127.0.0.1:1", "--store-server-time", "--store-deadline-floor", "10ms", "--store-deadline-ceiling", "2s",
				"--store-in-flight", "8", "--breaker-failures", "3", "--breaker-window", "1s", "--breaker-open", "5s"},
			wantStore: store.Config{Redis: "redis://127.0.0.1:1", RedisServerTime: true, Client: store.Pipe, Multiplex: 1, Timeout: 2 * time.Second},
			wantPop: pop.Config{
				Deadline:    pop.DeadlineConfig{Floor: 10 * ms, Ceiling: 2 * time.Second},
				MaxInFlight: 8,
				Breaker:     pop.BreakerConfig{Failures: 3, Window: time.Second, OpenFor: 5 * time.Second},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.args, func(c *cli.Context) error {
				cfg, shared, err := Open(c)
				if err != nil {
					return err
				}
				defer shared.Close()
				if cfg.Deadline != tc.wantPop.Deadline || cfg.MaxInFlight != tc.wantPop.MaxInFlight || cfg.Breaker != tc.wantPop.Breaker {
					t.Errorf("pop.Config: deadline %+v, in flight %d, breaker %+v; want %+v, %d, %+v",
						cfg.Deadline, cfg.MaxInFlight, cfg.Breaker, tc.wantPop.Deadline, tc.wantPop.MaxInFlight, tc.wantPop.Breaker)
				}
				scfg, err := storeConfig(c, cfg.Deadline.SocketTimeout())
				if err != nil {
					return err
				}
				if scfg.Memcached == nil {
					scfg.Memcached = []string{}
				}
				want := tc.wantStore
				if want.Memcached == nil {
					want.Memcached = []string{}
				}
				if !reflect.DeepEqual(scfg, want) {
					t.Errorf("store.Config = %+v, want %+v", scfg, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
