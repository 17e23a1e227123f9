package pop

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// HeaderMode selects which rate-limit response headers are written.
type HeaderMode int

const (
	// HeadersBoth writes the seed's RateLimit-Limit/Remaining/Reset and the
	// draft-11 RateLimit-Policy/RateLimit structured fields (default).
	HeadersBoth HeaderMode = iota
	// HeadersSeed writes only RateLimit-Limit, RateLimit-Remaining,
	// RateLimit-Reset.
	HeadersSeed
	// HeadersDraft11 writes only RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11).
	HeadersDraft11
	// HeadersNone writes no rate-limit headers (Retry-After still is).
	HeadersNone
)

// FailMode says what a policy does when the store cannot be consulted.
type FailMode int

const (
	// FailOpen admits (default).
	FailOpen FailMode = iota
	// FailClosed rejects with 503: limiter health, not a quota answer.
	FailClosed
	// FailLocal enforces an in-process budget of each limit divided by the
	// number of workers in the PoP.
	FailLocal
)

func (m FailMode) String() string {
	switch m {
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "open"
}

// ValidationError is one problem in a policy file. It wraps
// ErrInvalidPolicy.
type ValidationError struct {
	File  string // file name as given to Parse
	Line  int    // 1-based line of the offending node, 0 if unknown
	Field string // dotted path, e.g. "tiers.free.limits[0].window"
	Msg   string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidPolicy }

// KeyRecord is what the policy file knows about one API key.
type KeyRecord struct {
	Tenant string
	Tier   string
	// Inactive marks a revoked key: its requests get 403
	// (ReasonKeyInactive). Policy sources set it (pop/pgpolicy).
	Inactive bool
}

// LimitSpec is one limit of a tier, with its per-request cost.
type LimitSpec struct {
	Limit counter.Limit
	// Cost is the number of units one request consumes; default 1.
	Cost int64
	// Shadow (`shadow: true`) makes the limit a dry run: it counts and
	// decides as usual, but a request only shadow limits would reject is
	// admitted, and metrics and events say it would have been (shadow.go).
	Shadow bool
	// MitigationTimeout (`mitigation_timeout:`), if positive, keeps an
	// identity this limit rejected rejected for that long, on every worker
	// of the PoP (a flag key in the store: mitigation.go).
	MitigationTimeout time.Duration
	// Response, when set (Response.Set), counts the request after the
	// upstream answered (`count_if:`, `cost_header:`): response_count.go.
	// Values, not pointers: a policy's fingerprint prints its spec.
	Response ResponseCount
	// Concurrency, when set (MaxRequestTime > 0), makes this a concurrency
	// limit (`algorithm: concurrency`): at most Limit.Quantity requests of
	// one identity in flight across the PoP (concurrency.go).
	// Limit.Algorithm, Window and OnReject are then unused.
	Concurrency ConcurrencySpec
	// Global (YAML "scope: global") counts the limit across every PoP
	// through Config.NewGlobal (package pop/global) instead of per PoP;
	// it must be a fixed window. Default false: "scope: pop".
	Global bool
}

// TierSpec is a named set of limits, all enforced together (compound rule).
type TierSpec struct {
	Name   string
	Limits []LimitSpec
}

// LeaseSpec configures token leasing for a policy (opt-in).
type LeaseSpec struct {
	Enabled bool
	// MaxBatch caps a lease; default allowance/(4×workers), at least 1,
	// where allowance is Burst for a token bucket with a Burst and
	// Quantity otherwise. It may not exceed allowance/cost of any limit
	// the policy can apply (the parser rejects it; a default is capped
	// there).
	MaxBatch int64
	// Horizon is how far ahead of the observed arrival rate a lease is
	// sized, and its maximum lifetime; default 100ms.
	Horizon time.Duration
}

// PolicySpec is one policy: the routes it covers, the identity it counts
// and where its tier comes from.
type PolicySpec struct {
	Name string
	// Routes are net/http ServeMux patterns ("GET /api/{id}"); a request
	// matches the most specific pattern over all policies, after its path
	// is normalised (NormalizePath). Only the file's default policy may
	// have none.
	Routes []string
	// Identity lists the parts composing the counted key, in order.
	Identity []Part
	// TierSource is "api_key" (the key record's tier) or a tier name.
	TierSource string
	// DefaultTier applies when the source yields nothing (no key, unknown
	// key, record without tier).
	DefaultTier string
	// Overrides replace a tier's limits for this policy only.
	Overrides map[string][]LimitSpec
	FailMode  FailMode
	Lease     LeaseSpec
	// Shadow (`shadow: true`) makes every limit of the policy a dry run
	// (LimitSpec.Shadow).
	Shadow bool
}

// PrefilterSpec is the coarse per-IP token bucket run before any identity
// work. Quantity tokens per Window, Burst capacity.
type PrefilterSpec struct {
	Quantity int64
	Window   time.Duration
	Burst    int64
}

// File is a parsed, validated policy file.
type File struct {
	Name           string
	Headers        HeaderMode
	TrustedProxies TrustedProxies
	APIKey         APIKeySource
	UserHeader     string
	Prefilter      *PrefilterSpec
	// Keys are the API key records. When there are any, a key without a
	// record is treated as no key (anonymous, counted per client IP), so
	// made-up keys cannot mint fresh identities; with none, every key is
	// counted as it comes.
	Keys map[string]KeyRecord
	// KeyDigests says Keys is keyed by KeyDigest(key), not the key in
	// clear (pop/pgpolicy's files).
	KeyDigests bool
	// RejectUnknownKeys answers a key without a record 401
	// (ReasonKeyUnknown) instead of treating it as anonymous.
	RejectUnknownKeys bool
	Tiers             map[string]TierSpec
	Policies          []PolicySpec

	// DefaultPolicy names the policy applied to every request no route
	// matches (`default_policy:`; that policy may list no routes). With
	// none, unmatched requests are not limited: UnmatchedUnlimited says
	// the file asked for that explicitly (`unmatched: unlimited`); a load
	// warns either way.
	DefaultPolicy      string
	UnmatchedUnlimited bool
	// CaseInsensitivePaths (`case_insensitive_paths: true`) says the
	// upstream reads paths case-insensitively: paths are lower-cased
	// before matching (and forwarded so), and route patterns must be lower
	// case.
	CaseInsensitivePaths bool
	// MaxForwardedHops bounds the X-Forwarded-For / Forwarded hops
	// examined from the right (`max_forwarded_hops:`); default
	// DefaultMaxForwardedHops.
	MaxForwardedHops int
	// IPv4Prefix and IPv6Prefix are the network sizes, in bits, per-IP
	// identities and the pre-filter count by (`ip_prefix: {ipv4: 32,
	// ipv6: 64}`): every address of one IPv6 /64 shares one count by
	// default. Zero means the default (32, 64).
	IPv4Prefix, IPv6Prefix int
	// RejectionBody (`rejection_body: json|problem`) is the body of a
	// rejection: BodyJSON (default) or BodyProblem (application/problem+json).
	RejectionBody BodyFormat
	// ShadowHeader (`shadow_header: true`) makes the middleware answer a
	// request a shadow limit would have rejected with
	// `X-RateLimit-Shadow: <limit>`.
	ShadowHeader bool
	// Shadow (`shadow: true`) makes every policy of the file a dry run
	// (PolicySpec.Shadow is set on each); a reload without it enforces.
	Shadow bool
}

// maxHops is MaxForwardedHops resolved.
func (f *File) maxHops() int {
	if f.MaxForwardedHops > 0 {
		return f.MaxForwardedHops
	}
	return DefaultMaxForwardedHops
}

// ClientNet is the network a per-IP count keys on: a masked to the file's
// ip_prefix for its family (the zero Addr stays zero).
func (f *File) ClientNet(a netip.Addr) netip.Addr {
	if !a.IsValid() {
		return a
	}
	bits := f.IPv6Prefix
	if a.Is4() {
		bits = f.IPv4Prefix
		if bits == 0 {
			bits = 32
		}
	} else if bits == 0 {
		bits = 64
	}
	a = a.WithZone("")
	if bits >= a.BitLen() {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}
