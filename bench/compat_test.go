package bench

import "github.com/poplimit/poplimit/bench/fixture"

// The test helpers the files bench/proxy*_test.go still call while issue 11
// owns them; they call fixture directly (and this file goes) once those
// files are free.
var (
	MemcachedForTest = fixture.Memcached
	FreeAddrForTest  = fixture.FreeAddr
	FlushForTest     = fixture.Flush
	SetValuesForTest = fixture.SetValues
	GetValuesForTest = fixture.GetValues
	MigrationKeys    = fixture.MigrationKeys
)
