// Package pop is the edge worker library of poplimit: for each HTTP request
// it decides whether the request goes through and tells the client why not in
// the standard way.
//
// A decision runs: coarse per-IP pre-filter (local only) → identity
// extraction (client IP honouring trusted proxies, API key, user, tenant,
// route) → policy lookup in an immutable snapshot → mitigation cache (blocked
// identities are rejected locally until their estimate falls back) → the
// shared count in package counter, guarded by a store deadline and a circuit
// breaker, with a per-policy fail mode (open, closed, local) → optional token
// leases served locally.
//
// Policies and tiers come from a YAML file (see testdata/policies/example.yml),
// parsed and validated by package pop/policy, and are swapped atomically on
// reload (file watch, SIGHUP, admin endpoint); in-flight requests finish
// under the snapshot they started with.
//
// Reading order, one decision top-down (Limiter.Decide, decide.go):
// identity.go (identify) → snapshot.go, route.go (the policy snapshot and
// the route matched) → mitigation.go (the mitigation cache) → decide.go
// (the count; breaker.go when the store is dead, slow or busy; lease.go
// for local token leases; finish.go for what is settled after the
// response) → middleware.go (the answer: headers and rejection bodies).
// Around it: limiter.go (Config, New, loading a policy), open.go (Open),
// engine.go (the same engine without HTTP, for pop/rls), metrics.go,
// events.go, admin.go, forward.go.
//
// pop never speaks the memcached protocol itself: Open builds the usual
// shared limiters (counter.New over a memcached.Store or
// memcached.PipeStore aimed at the host's mcproxy) and loads the policy in
// one call; New takes them from the caller through Config.NewShared, for
// any other counter.Store. pop imports counter, counter/memcached and
// pop/policy; the file watchers and signals of a daemon live beside it, in
// cmd/internal/daemon.
package pop

import (
	"errors"
	"net/http"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrInvalidPolicy wraps every policy file validation error: it is
	// policy.ErrInvalidPolicy, for callers of Open and LoadFile.
	ErrInvalidPolicy = policy.ErrInvalidPolicy
	// ErrNoPolicy is returned when a Limiter is used before a snapshot was
	// loaded.
	ErrNoPolicy = errors.New("pop: no policy loaded")
	// ErrConfig reports an unusable Config.
	ErrConfig = errors.New("pop: bad config")
)

// Reason says which stage of the pipeline produced a Decision.
type Reason string

// Reasons, also used as the "result" label of metrics.
const (
	ReasonNoPolicy   Reason = "no_policy"   // no route matched: not limited
	ReasonStore      Reason = "store"       // decided by the shared count
	ReasonLease      Reason = "lease"       // served from a local token lease
	ReasonMitigated  Reason = "mitigated"   // rejected by the mitigation cache
	ReasonPrefilter  Reason = "prefilter"   // rejected by the per-IP pre-filter
	ReasonFailOpen   Reason = "fail_open"   // store unavailable, admitted
	ReasonFailClosed Reason = "fail_closed" // store unavailable, 503
	ReasonFailLocal  Reason = "fail_local"  // store unavailable, local budget
	// ReasonContention: the store answered, but a limit could not update
	// its count (the token bucket lost its compare-and-swap race
	// Config.CASRetries times: a hot key). Rejected with 429, nothing
	// counted; not a store failure (no breaker, no fail mode).
	ReasonContention Reason = "contention"
	// ReasonCanceled: the request's context ended (the client went away)
	// before the store answered. Not admitted, whatever the fail mode, and
	// not a store failure (no fail-open count, no rejection event); Status
	// is 499 (client closed request).
	ReasonCanceled Reason = "canceled"
	// ReasonConcurrency: a concurrency limit had every slot of the
	// identity in flight (finish.go); 429.
	ReasonConcurrency Reason = "concurrency"
)

// Reasons of the key checks a policy source with key states enables.
const (
	// ReasonKeyInactive: the request's API key has a record marked
	// inactive (revoked). Rejected with 403: not a quota answer.
	ReasonKeyInactive Reason = "key_inactive"
	// ReasonKeyUnknown: the request's API key has no record while the
	// file says unknown keys are refused (File.RejectUnknownKeys): 401.
	ReasonKeyUnknown Reason = "key_unknown"
)

// Reasons of decisions taken by the local budget while the store is alive.
const (
	// ReasonStoreSlow: the store answered other calls within the breaker
	// window but this decision ran out of its deadline (a burst made the
	// store slow, it is not dead). Decided by the conservative local
	// budget (limit ÷ WorkersPerPoP per worker), whatever the fail mode:
	// never a fail-open, never a 503.
	ReasonStoreSlow Reason = "store_slow"
	// ReasonStoreBusy: MaxInFlight decisions were already waiting on the
	// store and no slot freed within InFlightWait. Decided by the local
	// budget like ReasonStoreSlow.
	ReasonStoreBusy Reason = "store_busy"
)

// LimitResult is the answer of one limit of a compound rule.
type LimitResult struct {
	Limit  counter.Limit
	Result counter.Result
}

// Decision is the answer for one request. The zero value admits.
type Decision struct {
	// Allowed reports whether the request may go through.
	Allowed bool
	// Status is the HTTP status of a rejection: 429 for a quota answer, 503
	// when the limiter itself is unhealthy (fail mode closed), 499 when the
	// client went away mid-decision (ReasonCanceled). 0 when Allowed.
	Status int
	// Policy and Tier name what was applied ("" with ReasonNoPolicy).
	Policy, Tier string
	// Reason says which stage decided.
	Reason Reason
	// Binding is the limit closest to exhaustion (the one that rejected, if
	// any); its Result feeds the RateLimit-* headers. Zero when no limit was
	// consulted.
	Binding LimitResult
	// All holds every limit of the rule in policy order (for the draft-11
	// RateLimit-Policy field). It may be nil.
	All []LimitResult

	// Shadow names the dry-run limit that would have rejected this
	// admitted request ("" when none would have): decide.go, shadowPass.
	Shadow string
	// ShadowBinding is the dry-run limits' closest result, as Binding is
	// the enforcing ones'. Zero when the rule has none or the store was
	// not asked: a store failure, or a would-be rejection replayed from
	// the mitigation cache or a shared flag (Shadow is then set).
	ShadowBinding LimitResult

	// policyField, when set, is the precomputed RateLimit-Policy value
	// matching All.
	policyField string
	// done, when not nil, is what Limiter.Finish owes the request once its
	// response is known: concurrency slots, counting by response.
	done *completion
}

// RetryAfter is the binding limit's RetryAfter (zero when admitted).
func (d Decision) RetryAfter() time.Duration { return d.Binding.Result.RetryAfter }

// limited reports whether a limit was consulted and headers make sense.
func (d Decision) limited() bool { return d.Binding.Limit.Quantity > 0 }

// statusClientClosed is nginx's 499: the client closed the request.
const statusClientClosed = 499

func rejectStatus(r Reason) int {
	if r == ReasonFailClosed {
		return http.StatusServiceUnavailable
	}
	if r == ReasonCanceled {
		return statusClientClosed
	}
	return http.StatusTooManyRequests
}
