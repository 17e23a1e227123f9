// Package proxy is mcproxy's core: a Twemproxy-style memcached text protocol
// proxy. It is built in layers, one per file:
//
//   - proxy/protocol: the parsed Request and Parse, pure functions over a
//     byte buffer (memcached 1.6 text and meta protocol, with memcached's
//     replies for bad input), and the framing of a shard's replies;
//     meta_server.go: how the proxy answers meta requests;
//   - route.go: hash tag → shard, through shard's ring snapshot;
//   - backend.go, pool.go: the Backend interface and the pipelined connection
//     pool to a memcached shard;
//   - respond.go: merging multi-key and broadcast replies, the proxy's stats;
//   - server.go: the per-client loop (pipelined requests answered in order);
//   - config.go: the Twemproxy-compatible YAML configuration.
package proxy
