package main

import (
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
)

// grpcFlags tune the gRPC server's CPU per request.
func grpcFlags() []cli.Flag {
	return []cli.Flag{
		&cli.UintFlag{Name: "grpc-stream-workers", Value: 0, Usage: "goroutines kept to run RPCs (their stacks stay grown); 0 = a new goroutine per RPC"},
		&cli.IntFlag{Name: "grpc-read-buffer", Value: 0, Usage: "gRPC connection read buffer bytes; 0 = grpc's default (32 KiB)"},
		&cli.IntFlag{Name: "grpc-write-buffer", Value: 0, Usage: "gRPC connection write buffer bytes; 0 = grpc's default (32 KiB)"},
	}
}

// grpcOptions are the server options of grpcFlags.
func grpcOptions(c *cli.Context) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if n := c.Uint("grpc-stream-workers"); n > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(n)))
	}
	if n := c.Int("grpc-read-buffer"); n > 0 {
		opts = append(opts, grpc.ReadBufferSize(n))
	}
	if n := c.Int("grpc-write-buffer"); n > 0 {
		opts = append(opts, grpc.WriteBufferSize(n))
	}
	return opts
}
