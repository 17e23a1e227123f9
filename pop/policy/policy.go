// Package policy is the policy file format of package pop: Parse takes
// the bytes of a YAML policy file and returns a validated *File, or every
// problem found, each naming the file, line and field. It does no I/O and
// holds no behaviour: package pop compiles a File into the limiter's
// snapshot. POLICY.md beside this file is the format's reference.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// ErrInvalidPolicy wraps every policy file validation error.
var ErrInvalidPolicy = errors.New("pop: invalid policy")

// Part names one identity component a policy can key on.
type Part string

// Identity parts.
const (
	PartIP     Part = "ip"      // client IP, trusted-proxy aware
	PartAPIKey Part = "api_key" // API key (only its digest is ever stored or logged)
	PartUser   Part = "user"    // user id header
	PartTenant Part = "tenant"  // tenant from the API key's record
	PartRoute  Part = "route"   // method + path pattern of the matched route
)

// APIKeySource says where an API key may be found; the first non-empty
// source wins in the order Header, Bearer, Query.
type APIKeySource struct {
	Header string // request header, e.g. "X-API-Key" (canonical)
	Bearer bool   // "Authorization: Bearer <key>"
	Query  string // query parameter name
}

// TrustedProxies is a set of CIDRs whose forwarding headers are believed.
// The zero value trusts nobody: the client IP is the connection's peer.
type TrustedProxies []netip.Prefix

// Contains reports whether a (unmapped) is a trusted proxy.
func (t TrustedProxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// DefaultMaxForwardedHops is how many forwarding hops are examined when
// no other bound is given (File.MaxForwardedHops zero).
const DefaultMaxForwardedHops = 16

// KeyID returns the digest used in place of an API key everywhere outside
// the request: the first 12 bytes of its SHA-256, hex encoded.
func KeyID(apiKey string) string {
	if apiKey == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:12])
}

// KeyDigest is the lower-case hex SHA-256 digest of an API key (64
// characters): how File.Keys is keyed when File.KeyDigests is set, and
// how pop/pgpolicy stores keys. KeyID(k) is its first 24 characters.
func KeyDigest(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// Allowance is the most units one window (or a full token bucket) of lim
// can grant at once: Burst for a token bucket with a Burst, else Quantity.
func Allowance(lim counter.Limit) int64 {
	if lim.Algorithm == counter.TokenBucket && lim.Burst > 0 {
		return lim.Burst
	}
	return lim.Quantity
}

// BodyFormat selects the body of a rejection (`rejection_body:`).
type BodyFormat int

const (
	// BodyJSON is {"error":"rate_limit_exceeded","retry_after":N}
	// (default).
	BodyJSON BodyFormat = iota
	// BodyProblem is an RFC 9457 application/problem+json body with the
	// problem types of draft-ietf-httpapi-ratelimit-headers: quota-exceeded
	// (429) and temporary-reduced-capacity (503, the limiter unavailable
	// and the policy failing closed).
	BodyProblem
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
	// (pop.ReasonKeyInactive). Policy sources set it (pop/pgpolicy).
	Inactive bool
}

// LimitSpec is one limit of a tier, with its per-request cost.
type LimitSpec struct {
	Limit counter.Limit
	// Cost is the number of units one request consumes; default 1.
	Cost int64
	// Shadow (`shadow: true`) makes the limit a dry run: it counts and
	// decides as usual, but a request only shadow limits would reject is
	// admitted, and metrics and events say it would have been (package pop's dry run).
	Shadow bool
	// MitigationTimeout (`mitigation_timeout:`), if positive, keeps an
	// identity this limit rejected rejected for that long, on every worker
	// of the PoP (a flag key in the store).
	MitigationTimeout time.Duration
	// Response, when set (Response.Set), counts the request after the
	// upstream answered (`count_if:`, `cost_header:`).
	// Values, not pointers: a policy's fingerprint prints its spec.
	Response ResponseCount
	// Concurrency, when set (MaxRequestTime > 0), makes this a concurrency
	// limit (`algorithm: concurrency`): at most Limit.Quantity requests of
	// one identity in flight across the PoP.
	// Limit.Algorithm, Window and OnReject are then unused.
	Concurrency ConcurrencySpec
	// Global (YAML "scope: global") counts the limit across every PoP
	// through pop.Config.NewGlobal (package pop/global) instead of per PoP;
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
	// is normalised (pop.NormalizePath). Only the file's default policy may
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
	// (pop.ReasonKeyUnknown) instead of treating it as anonymous.
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

// MaxHops is MaxForwardedHops resolved.
func (f *File) MaxHops() int {
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

// LookupKey finds the record of apiKey, by digest when f.KeyDigests, and
// the key's id (KeyID, or the digest's first 24 characters).
func (f *File) LookupKey(apiKey string) (rec KeyRecord, keyID string, known bool) {
	if !f.KeyDigests {
		rec, known = f.Keys[apiKey]
		return rec, KeyID(apiKey), known
	}
	d := KeyDigest(apiKey)
	rec, known = f.Keys[d]
	return rec, d[:24], known
}

// Concurrency limit defaults.
const (
	// DefaultMaxRequestTime is a concurrency limit's max_request_time: the
	// edge's --upstream-timeout default.
	DefaultMaxRequestTime = time.Minute
	// DefaultConcurrencyRetryAfter is a concurrency limit's retry_after.
	DefaultConcurrencyRetryAfter = time.Second
	// maxCostCeiling bounds cost_header.max.
	maxCostCeiling = 1 << 30
)

// ConcurrencySpec configures a concurrency limit.
type ConcurrencySpec struct {
	// MaxRequestTime (`max_request_time:`, default DefaultMaxRequestTime)
	// is the longest a request is counted in flight: a slot whose release
	// never comes (a crashed worker) stops counting at most 1.25 times this
	// after its request was admitted. Set it at or above
	// the upstream timeout.
	MaxRequestTime time.Duration
	// RetryAfter (`retry_after:`, default DefaultConcurrencyRetryAfter) is
	// the Retry-After of a rejection.
	RetryAfter time.Duration
}

// StatusRange is an inclusive range of HTTP statuses (Lo == Hi for one).
type StatusRange struct{ Lo, Hi int }

// ResponseCount says how a limit counts a request after its response:
// only when the status matches Statuses (all when empty), Cost units, or
// the value of the CostHeader response header when set (bounded).
type ResponseCount struct {
	Statuses []StatusRange
	// CostHeader is the canonical name of the response header holding the
	// cost (`cost_header: {name: X-Cost}`); "" charges LimitSpec.Cost.
	CostHeader string
	// MaxCost caps a header's cost (`max:`, default the limit's
	// allowance); a larger value is charged MaxCost and counted in
	// poplimit_response_cost_invalid_total{reason="too_large"}.
	MaxCost int64
	// DefaultCost (`default:`, default 1) is charged when the header is
	// missing, negative or not an integer (also counted in that metric).
	DefaultCost int64
}

// Set reports whether the limit counts by response.
func (rc ResponseCount) Set() bool { return len(rc.Statuses) > 0 || rc.CostHeader != "" }

// Matches reports whether status is counted.
func (rc ResponseCount) Matches(status int) bool {
	if len(rc.Statuses) == 0 {
		return true
	}
	for _, r := range rc.Statuses {
		if status >= r.Lo && status <= r.Hi {
			return true
		}
	}
	return false
}
