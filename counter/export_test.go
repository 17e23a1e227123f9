package counter

// Test-only access for the external tests (package counter_test) to what
// the package does not export.

// MaxIdentityLen is the longest identity key AllowN accepts.
const MaxIdentityLen = maxIdentityLen

// LegalKey reports whether k is a legal memcached key.
func LegalKey(k string) bool { return legalKey(k) }

// BucketStats is the token bucket's compare-and-swap counts.
type BucketStats = bucketStats

// BucketStats returns the token bucket's compare-and-swap counts so far.
func (lim *Limiter) BucketStats() BucketStats { return lim.bucketStats() }

// Coalesced returns the decisions so far that joined another's store call.
func (lim *Limiter) Coalesced() int64 { return lim.coalescedDecisions() }

// CachedKeys returns the number of identities with cached window state.
func (lim *Limiter) CachedKeys() int { return lim.cachedKeys() }

// LocalLen returns the number of keys with state of a NewLocal limiter.
func LocalLen(a Allower) int { return a.(*local).size() }
