package openloop

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// PathHop is the floor's incr through bench/fixture/tcphop, a bare TCP
// forwarder in a process of its own (one upstream connection per client,
// bytes copied, nothing parsed) to the floor's shard: the latency one more
// process on the path adds by itself on this machine, under which neither
// proxy nor the full decision through one can go. The targets judge
// the proxies' and the decision's added tail against it as well as
// against the floor.
const pathHop = "hop"

// startOpenHop builds and starts a tcphop to target; it returns the
// process (Addr its address).
func startOpenHop(ctx context.Context, dir, target string) (*procs.Proc, error) {
	bin, err := procs.BuildPackage(ctx, dir, "bench/fixture/tcphop")
	if err != nil {
		return nil, fmt.Errorf("%w: hop: %v", errOpenLoop, err)
	}
	pr, err := procs.StartServing(ctx, "tcphop", bin, filepath.Join(dir, "tcphop.log"), func(addr string) []string {
		return []string{"--listen", addr, "--target", target}
	}, func(addr string) error { return procs.Ping(addr, 200*time.Millisecond) })
	if err != nil {
		return nil, fmt.Errorf("%w: hop: %v", errOpenLoop, err)
	}
	return pr, nil
}
