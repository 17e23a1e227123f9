package bench

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// TestLaunchPoPCleansUp launches a PoP with embedded shards (no memcached
// needed), exercises the shard controls, and checks Close leaves no
// process behind.
func TestLaunchPoPCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("launches processes")
	}
	b := testBins(t)
	if b.MCProxy == "" {
		t.Fatal("mcproxy does not build")
	}
	ctx := context.Background()
	p, err := launchPoP(ctx, PoPConfig{Name: "t", Shards: 2, Proxies: 2, Store: StoreEmbedded, Dir: t.TempDir(),
		Bins: Binaries{MCProxy: b.MCProxy}, StoreDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if len(p.Shards) != 2 || len(p.Proxies) != 2 || len(p.StoreRelays) != 2 {
		t.Fatalf("%s", p.Describe())
	}
	servers, direct := p.WorkerServers()
	if direct || len(servers) != 2 || servers[0] != p.StoreRelays[0].Addr {
		t.Fatalf("worker servers %v direct %v", servers, direct)
	}
	for _, s := range servers {
		if err := procs.Ping(s, 2*time.Second); err != nil {
			t.Fatalf("through relay %s: %v", s, err)
		}
	}
	sh := p.Shards[0]
	if err := sh.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := procs.Ping(sh.Direct, 300*time.Millisecond); err == nil {
		t.Error("a paused shard answered")
	}
	if err := sh.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := procs.Ping(sh.Direct, 2*time.Second); err != nil {
		t.Fatalf("resumed shard: %v", err)
	}
	old := sh.Pid()
	sh.Kill()
	if err := sh.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if sh.Pid() == old {
		t.Error("restart kept the pid")
	}
	if err := p.RestartProxy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pids := []int{p.Shards[0].Pid(), p.Shards[1].Pid(), p.Proxies[0].Pid(), p.Proxies[1].Pid()}
	p.close()
	p.close() // twice is fine
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still there after Close: %v", pid, err)
		}
	}
}

func TestLaunchPoPNeedsWhatItRuns(t *testing.T) {
	if _, err := launchPoP(context.Background(), PoPConfig{Store: StoreEmbedded, Dir: t.TempDir()}); !errors.Is(err, procs.ErrNotBuilt) {
		t.Fatalf("embedded shards without mcproxy: %v", err)
	}
	if _, err := launchPoP(context.Background(), PoPConfig{Edges: 1, Dir: t.TempDir(), Bins: Binaries{MCProxy: "x"}}); err == nil {
		t.Fatal("edges without a policy accepted")
	}
}
