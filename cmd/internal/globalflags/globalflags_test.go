package globalflags

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/global"
	"github.com/poplimit/poplimit/pop/policy"
)

// wire runs Wire on args through a cli.App, as edge and rls do.
func wire(t *testing.T, args ...string) (newGlobal func(counter.Limit, policy.FailMode) (counter.Allower, error), health func() []string, err error) {
	t.Helper()
	app := &cli.App{Name: "t", Flags: Flags(), Action: func(c *cli.Context) error {
		newGlobal, health, err = Wire(c, memstore.New(), 2, prometheus.NewRegistry())
		return nil
	}}
	if rerr := app.Run(append([]string{"t"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return newGlobal, health, err
}

func TestWire(t *testing.T) {
	if ng, h, err := wire(t); ng != nil || h != nil || err != nil {
		t.Errorf("without --global-memcached: %v %v %v, want all nil", ng != nil, h != nil, err)
	}
	if _, _, err := wire(t, "--global-memcached", "127.0.0.1:1", "--pops", "0"); err == nil || !strings.Contains(err.Error(), "--pops 0") {
		t.Errorf("--pops 0: %v", err)
	}
	if _, _, err := wire(t, "--global-memcached", "127.0.0.1:1", "--global-wait", "0s"); err == nil || !strings.Contains(err.Error(), "--global-wait 0s") {
		t.Errorf("--global-wait 0s: %v", err)
	}
	ng, h, err := wire(t, "--global-memcached", "127.0.0.1:1", "--pops", "3", "--global-wait", "200ms")
	if err != nil || ng == nil || h == nil {
		t.Fatalf("wired: %v", err)
	}
	fixed := counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute}
	if a, err := ng(fixed, policy.FailClosed); err != nil || a.Limit() != fixed {
		t.Errorf("NewGlobal: %v", err)
	}
	if _, err := ng(counter.Limit{Quantity: 10, Window: time.Minute}, policy.FailLocal); !errors.Is(err, global.ErrAlgorithm) {
		t.Errorf("a sliding window: %v, want ErrAlgorithm", err)
	}
	if r := h(); len(r) != 0 {
		t.Errorf("health before any claim: %v", r)
	}
}
