package openloop

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/poplimit/poplimit/bench"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// PathRLS is a full decision through cmd/rls: one gRPC ShouldRateLimit
// with one descriptor {user: identity} (domain "bench", every request
// admitted), rls counting through mcproxy with its default store client.
const pathRLS = "rls"

// rlsConns is the gRPC connections the rls path's workers share (HTTP/2
// streams), as popbench rls's clients do by default.
const rlsConns = 4

// startOpenRLS builds (unless bin is set) and starts one rls process over
// mcAddr with the bench domain at an allowance no run reaches; it returns
// the process (Addr its gRPC address) and how it was started.
func startOpenRLS(ctx context.Context, bin, dir, mcAddr string) (*procs.Proc, string, error) {
	if bin == "" {
		bins, err := procs.Build(ctx, dir, "rls")
		if err != nil {
			return nil, "", err
		}
		bin = bins["rls"]
	}
	confDir := filepath.Join(dir, "rls-config")
	if err := bench.WriteRLSConfig(confDir, "bench.yaml", bench.RLSBenchConfig(1<<30)); err != nil {
		return nil, "", err
	}
	port, err := procs.FreePort()
	if err != nil {
		return nil, "", err
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	pr, err := procs.StartServing(ctx, "rls", bin, filepath.Join(dir, "rls.log"), func(addr string) []string {
		return []string{"--grpc", addr, "--http", httpAddr, "--config-dir", confDir, "--memcached", mcAddr}
	}, func(string) error { return procs.HTTPOK("http://" + httpAddr + "/healthcheck") })
	if err != nil {
		return nil, "", fmt.Errorf("%w: rls: %v", errOpenLoop, err)
	}
	return pr, "rls --memcached mcproxy (its default store client), gRPC ShouldRateLimit, 1 descriptor, " + strconv.Itoa(rlsConns) + " connections", nil
}

// rlsOp is one ShouldRateLimit call to addr for the identity, worker w on
// connection w mod rlsConns; an error or an answer other than OK fails it.
func rlsOp(addr string, keys []string) (openOp, func(), error) {
	var clients []rlv3.RateLimitServiceClient
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, cc := range conns {
			cc.Close()
		}
	}
	for range rlsConns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, cc)
		clients = append(clients, rlv3.NewRateLimitServiceClient(cc))
	}
	return func(ctx context.Context, w int, k uint64) error {
		req := &rlv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: keys[k%uint64(len(keys))]}}}}}
		resp, err := clients[w%len(clients)].ShouldRateLimit(ctx, req)
		if err != nil {
			return err
		}
		if resp.GetOverallCode() != rlv3.RateLimitResponse_OK {
			return fmt.Errorf("%w: rls answered %v", errOpenLoop, resp.GetOverallCode())
		}
		return nil
	}, closeAll, nil
}
