package store

import (
	"testing"
	"time"
)

// TestConfigDefaults: zero means the binaries' defaults (the pipelined
// client, one shared connection, a 1s socket timeout), and set values
// are kept.
func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cfg           Config
		wantClient    string
		wantMultiplex int
		wantTimeout   time.Duration
	}{
		{"zero", Config{}, Pipe, 1, time.Second},
		{"gomemcache", Config{Client: Gomemcache}, Gomemcache, 1, time.Second},
		{"pipe named", Config{Client: Pipe}, Pipe, 1, time.Second},
		{"four connections", Config{Multiplex: 4}, Pipe, 4, time.Second},
		{"no sharing", Config{Multiplex: -1}, Pipe, 0, time.Second},
		{"timeout", Config{Timeout: 300 * time.Millisecond}, Pipe, 1, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.client(); got != tc.wantClient {
				t.Errorf("client() = %q, want %q", got, tc.wantClient)
			}
			if got := tc.cfg.multiplex(); got != tc.wantMultiplex {
				t.Errorf("multiplex() = %d, want %d", got, tc.wantMultiplex)
			}
			if got := tc.cfg.timeout(); got != tc.wantTimeout {
				t.Errorf("timeout() = %v, want %v", got, tc.wantTimeout)
			}
		})
	}
}
