package shard

// NewKetamaLive and NewModulaLive are the builders over a liveness view,
// until NewKetama and NewModula take one (issue 12: after package proxy's
// callers move).
var (
	NewKetamaLive = newKetama
	NewModulaLive = newModula
)
