package pop_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
	"github.com/poplimit/poplimit/pop"
)

// TestOpenMemcached runs ExampleOpen's service against real memcached,
// with each client Open builds, then as the README has it: through a
// PoP's mcproxy over two memcached shards. The same answers as in process.
func TestOpenMemcached(t *testing.T) {
	addr := fixture.Memcached(t, 1)[0].Addr
	want := "200 \"burst\";r=1;t=1\n200 \"burst\";r=0;t=1\n429 \"burst\";r=0;t=1\n"
	for _, tc := range []struct {
		name string
		o    pop.Options
	}{
		{"gomemcache", pop.Options{Store: store.Config{Memcached: []string{addr}, Client: store.Gomemcache}}},
		{"pipe", pop.Options{Store: store.Config{Memcached: []string{addr}, Multiplex: -1}}},
		{"pipe-mux", pop.Options{Store: store.Config{Memcached: []string{addr}, Multiplex: 2}}},
		{"mcproxy", pop.Options{}}, // Store.Memcached: set below
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if tc.name == "mcproxy" {
				_, mcBin := binaries(t)
				o.Store.Memcached = []string{startMcproxy(t, mcBin, "", fixture.Memcached(t, 2)).addr}
			} else {
				fixture.Flush(t, addr)
			}
			var out strings.Builder
			serve(&out, o)
			if out.String() != want {
				t.Fatalf("through memcached:\n%s\nwant:\n%s", out.String(), want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	shared := func(counter.Limit) (counter.Allower, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		o    pop.Options
		want error
	}{
		{"no policy", pop.Options{}, pop.ErrConfig},
		{"NewShared given", pop.Options{PolicyDoc: []byte(exampleDoc), Config: pop.Config{NewShared: shared}}, pop.ErrConfig},
		{"unknown client", pop.Options{PolicyDoc: []byte(exampleDoc), Store: store.Config{Client: "redis"}}, pop.ErrConfig},
		{"pipe with two addresses", pop.Options{PolicyDoc: []byte(exampleDoc), Store: store.Config{Memcached: []string{"127.0.0.1:1", "127.0.0.1:2"}}}, pop.ErrConfig},
		{"negative timeout", pop.Options{PolicyDoc: []byte(exampleDoc), Store: store.Config{Timeout: -1}}, pop.ErrConfig},
		{"bad config", pop.Options{PolicyDoc: []byte(exampleDoc), Config: pop.Config{MaxInFlight: -1}}, pop.ErrConfig},
		{"invalid policy", pop.Options{Policy: "bad.yml", PolicyDoc: []byte("version: 9\n")}, pop.ErrInvalidPolicy},
		{"missing file", pop.Options{Policy: "testdata/no-such-policy.yml"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := pop.Open(context.Background(), tc.o)
			if err == nil || l != nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Open = %v, %v; want an error wrapping %v", l, err, tc.want)
			}
		})
	}
}
