// Package bench launches PoPs (memcached shards, mcproxy and edge workers as
// processes on free loopback ports), drives seeded workloads through them and
// measures throughput, latency, accuracy and behaviour under faults. It is
// the engine of cmd/popbench; no library package imports it (tests may).
package bench
