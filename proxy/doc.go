// Package proxy is mcproxy's core: a Twemproxy-style memcached text protocol
// proxy. It is built in layers, one per file, over proxy/protocol (the
// memcached protocol as pure functions: Parse, the meta commands, the
// framing of a shard's replies) and shard (placement):
//
//   - route.go: hash tag → shard, through shard's ring snapshot;
//   - backend.go, pool.go, poolread.go: the Backend interface and the
//     pipelined connection pool to a memcached shard (poolread.go: a
//     connection's reader); local.go: a Backend over an
//     in-process Executor (proxy/embedded's memcached, for --embedded);
//   - respond.go: merging multi-key and broadcast replies, the proxy's
//     stats; meta_server.go: how the proxy answers meta requests;
//   - server.go: the server and its client connections; clientread.go:
//     a client's reader (parse, dispatch), clientio.go: its writer
//     (pipelined requests answered in order);
//   - config.go, reload.go: the Twemproxy-compatible YAML configuration
//     and its reload.
//
// proxy/memrelease decides when the memory of clients that went idle
// together goes back to the operating system (the Server's sweeper calls
// it).
package proxy
