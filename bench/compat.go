package bench

import "github.com/poplimit/poplimit/bench/fixture/procs"

// The names the files bench/proxy*.go still use while issue 11 owns them;
// they move to procs and fixture (and this file goes) once those files are
// free. Each is the procs implementation, not a copy.

type (
	// Memcached is procs.Memcached.
	Memcached = procs.Memcached
	// MemcachedConfig is procs.MemcachedConfig.
	MemcachedConfig = procs.MemcachedConfig
	// Proc is procs.Proc.
	Proc = procs.Proc
)

var (
	// ErrNotBuilt is procs.ErrNotBuilt.
	ErrNotBuilt = procs.ErrNotBuilt
	// FreePort is procs.FreePort.
	FreePort = procs.FreePort
	// Ping is procs.Ping.
	Ping = procs.Ping
	// StartMemcached is procs.StartMemcached.
	StartMemcached = procs.StartMemcached
	// StartProc is procs.StartProc.
	StartProc = procs.StartProc
	// Build is procs.Build.
	Build = procs.Build
	// ProcResources is procs.ReadResources.
	ProcResources = procs.ReadResources
)

// RequireMemcachedEnv is fixture.RequireEnv (bench may not import fixture).
const RequireMemcachedEnv = "POPLIMIT_REQUIRE_MEMCACHED"
