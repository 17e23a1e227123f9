package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
)

// ServiceConfig configures a Service. Zero means default.
type ServiceConfig struct {
	// Limiter decides every descriptor (required): its store, breaker,
	// deadline and metrics are the PoP's.
	Limiter *pop.Limiter
	// ShadowMode is envoyproxy/ratelimit's global SHADOW_MODE: everything
	// is decided and counted, and the overall code is always OK.
	ShadowMode bool
	// Headers adds RateLimit-Limit, -Remaining and -Reset (the names
	// below) to response_headers_to_add (LIMIT_RESPONSE_HEADERS_ENABLED).
	Headers                                   bool
	HeaderLimit, HeaderRemaining, HeaderReset string
	// FailClosedUnavailable answers a request one of whose descriptors
	// failed closed (store unavailable, fail_mode: closed) with gRPC
	// UNAVAILABLE, so Envoy's failure_mode_deny decides; default: the
	// descriptor is OVER_LIMIT.
	FailClosedUnavailable bool
	// MaxDescriptors bounds the descriptors of one request (default 256),
	// MaxEntries the entries of one descriptor (default 32), MaxBytes the
	// bytes of one key or value (default 1024): beyond, INVALID_ARGUMENT.
	MaxDescriptors, MaxEntries, MaxBytes int
	// NearLimitRatio is the share of a limit above which an admission
	// counts as near_limit; default 0.8.
	NearLimitRatio float64
	// Stats receives envoyproxy/ratelimit's statistics; nil disables.
	Stats *Stats
	// Events, if not nil, receives an event for every OVER_LIMIT
	// descriptor and every shadow-mode would-be one (pop.Event, with
	// Domain, Descriptor and the descriptor's identity digest).
	Events *pop.Events
	// Clock is the decision instant; default time.Now.
	Clock func() time.Time
	// Logger logs reloads; default slog.Default().
	Logger *slog.Logger
}

func orDefault[T int | float64](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Service answers ShouldRateLimit from the current Config. Safe for
// concurrent use; Load swaps the config atomically.
type Service struct {
	rlv3.UnimplementedRateLimitServiceServer
	cfg     ServiceConfig
	cur     atomic.Pointer[loaded]
	lastErr atomic.Pointer[error]
	ov      overrides
}

type loaded struct {
	cfg   *Config
	rules *pop.RuleSet
	at    time.Time
}

// NewService returns a Service with no config: every descriptor is OK
// (unknown domain) until Load.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: ServiceConfig.Limiter is nil", ErrConfig)
	}
	if cfg.MaxDescriptors < 0 || cfg.MaxEntries < 0 || cfg.MaxBytes < 0 || cfg.NearLimitRatio < 0 || cfg.NearLimitRatio > 1 {
		return nil, fmt.Errorf("%w: negative bound or near-limit ratio outside [0, 1]", ErrConfig)
	}
	cfg.MaxDescriptors = orDefault(cfg.MaxDescriptors, 256)
	cfg.MaxEntries = orDefault(cfg.MaxEntries, 32)
	cfg.MaxBytes = orDefault(cfg.MaxBytes, 1024)
	cfg.NearLimitRatio = orDefault(cfg.NearLimitRatio, 0.8)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeaderLimit == "" {
		cfg.HeaderLimit = "RateLimit-Limit"
	}
	if cfg.HeaderRemaining == "" {
		cfg.HeaderRemaining = "RateLimit-Remaining"
	}
	if cfg.HeaderReset == "" {
		cfg.HeaderReset = "RateLimit-Reset"
	}
	return &Service{cfg: cfg}, nil
}

// Load installs c, reusing the compiled rules of the current config that
// are unchanged (their counts are in the store either way; the mitigation
// cache and leases survive). On error the current config stays.
func (s *Service) Load(c *Config) error {
	var old *pop.RuleSet
	if l := s.cur.Load(); l != nil {
		old = l.rules
	}
	rules, err := s.cfg.Limiter.CompileRules(c.Rules, old)
	if err != nil {
		return s.loaded(err)
	}
	s.cur.Store(&loaded{cfg: c, rules: rules, at: s.cfg.Clock()})
	s.cfg.Logger.Info("rls config loaded", "files", len(c.Files), "domains", len(c.Domains), "rules", rules.Len())
	return s.loaded(nil)
}

// LoadDir loads the config files of dir (LoadDir) and installs them. On
// error (any file invalid) the current config stays and the error names
// each file, line and reason.
func (s *Service) LoadDir(dir string, opt Options) error {
	c, err := LoadDir(dir, opt)
	if err != nil {
		return s.loaded(err)
	}
	return s.Load(c)
}

func (s *Service) loaded(err error) error {
	s.cfg.Stats.reload(err)
	if err != nil {
		s.lastErr.Store(&err)
		msg := "rls config rejected, keeping the previous one"
		if s.cur.Load() == nil {
			msg = "rls config rejected, no config loaded yet"
		}
		s.cfg.Logger.Error(msg, "err", err)
		return err
	}
	s.lastErr.Store(nil)
	return nil
}

// LastLoadError is the error of the last load, nil after a success.
func (s *Service) LastLoadError() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Config is the installed config, nil before the first Load.
func (s *Service) Config() *Config {
	if l := s.cur.Load(); l != nil {
		return l.cfg
	}
	return nil
}

// descriptor is one request descriptor's match.
type descriptor struct {
	limit     *Limit
	statsKey  string
	hits      int64
	unlimited bool
	rule      *pop.Rule // the compiled rule of limit
	check     int       // index in the batch, -1 when nothing is decided
}

// errBadRequest marks a request refused as malformed.
var errBadRequest = errors.New("rls: bad request")

// ShouldRateLimit implements envoy.service.ratelimit.v3's RPC: every
// descriptor is matched, all the matched limits are decided in one batch
// (pop.Limiter.DecideAll), and the answer is built as envoyproxy/ratelimit
// builds it. A malformed request (empty domain, no descriptors, an empty
// key, more than the configured descriptors, entries or bytes) is
// INVALID_ARGUMENT; with FailClosedUnavailable a fail-closed decision is
// UNAVAILABLE.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlv3.RateLimitRequest) (*rlv3.RateLimitResponse, error) {
	now := s.cfg.Clock()
	if err := s.validate(req); err != nil {
		s.cfg.Stats.badRequest()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cur := s.cur.Load()
	sc := getScratch(len(req.Descriptors))
	defer putScratch(sc)
	descs, checks := sc.descs, sc.checks
	var replacing map[string]bool // the names replaced, made by the first replaces
	var ebuf [8]Entry
	for i, d := range req.Descriptors {
		ds := &descs[i]
		ds.check = -1
		ds.hits = int64(max(1, req.HitsAddend))
		if h := d.GetHitsAddend(); h != nil {
			ds.hits = int64(min(h.Value, math.MaxInt32))
		}
		if cur == nil {
			continue
		}
		entries := ebuf[:0]
		for _, e := range d.Entries {
			entries = append(entries, Entry{e.Key, e.Value})
		}
		if o := d.GetLimit(); o != nil {
			if cur.cfg.Domains[req.Domain] == nil {
				continue // unknown domain: OK, as without the override
			}
			ov, err := s.override(cur.cfg.Options, Unit(o.Unit), o.RequestsPerUnit)
			if err != nil {
				s.cfg.Stats.badRequest()
				return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("descriptor %d: %v", i, err))
			}
			ds.limit, ds.rule, ds.statsKey = ov.limit, ov.rule, detailedKey(req.Domain, entries) // envoyproxy/ratelimit's descriptorKey
			continue
		}
		ds.limit, ds.statsKey = cur.cfg.Match(req.Domain, entries)
		if ds.limit == nil {
			continue
		}
		ds.rule = cur.rules.Rule(ds.limit.FullKey)
		for _, r := range ds.limit.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		if ds.limit.Unlimited {
			ds.unlimited, ds.limit = true, nil
		}
	}
	pbuf := &sc.parts
	for i := range descs {
		ds := &descs[i]
		if ds.limit == nil {
			continue
		}
		if ds.limit.Name != "" && replacing[ds.limit.Name] {
			ds.limit = nil
			continue
		}
		ds.check = len(checks)
		checks = append(checks, pop.Check{Rule: ds.rule, Parts: pbuf.parts(req, i), Hits: ds.hits})
	}
	out := sc.decisions(len(checks))
	s.cfg.Limiter.DecideAll(ctx, checks, now, out)
	return s.answer(req, descs, checks, out, now)
}

// scratch is one call's working memory, recycled: nothing of it outlives
// the call (emit copies the parts it keeps).
type scratch struct {
	descs  []descriptor
	checks []pop.Check
	out    []pop.Decision
	parts  partsBuf
}

var scratches sync.Pool

// maxPooledDescriptors bounds the calls whose scratch is recycled, so one
// huge request does not pin its memory in the pool.
const maxPooledDescriptors = 64

func getScratch(n int) *scratch {
	sc, _ := scratches.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	if cap(sc.descs) < n {
		sc.descs, sc.checks = make([]descriptor, n), make([]pop.Check, 0, n)
	}
	sc.descs, sc.checks = sc.descs[:n], sc.checks[:0]
	return sc
}

// decisions is out for n checks, zeroed (putScratch clears what a call
// used).
func (sc *scratch) decisions(n int) []pop.Decision {
	if cap(sc.out) < n {
		sc.out = make([]pop.Decision, n)
	}
	sc.out = sc.out[:n]
	return sc.out
}

func putScratch(sc *scratch) {
	if cap(sc.descs) > maxPooledDescriptors {
		return
	}
	clear(sc.descs[:cap(sc.descs)])
	clear(sc.checks[:cap(sc.checks)])
	clear(sc.out)
	clear(sc.parts.all)
	sc.parts.free = sc.parts.all
	scratches.Put(sc)
}

// partsBuf holds the parts of one request's descriptors: one allocation
// for the usual few short descriptors.
type partsBuf struct{ all, free []string }

// parts are the identity of descriptor i: the domain, then each key and
// value (the wildcard and key-only nodes count per value, as
// envoyproxy/ratelimit's cache keys).
func (b *partsBuf) parts(req *rlv3.RateLimitRequest, i int) []string {
	d := req.Descriptors[i]
	n := 1 + 2*len(d.Entries)
	if len(b.free) < n {
		b.all = make([]string, max(n, 3*len(req.Descriptors)))
		b.free = b.all
	}
	p := b.free[:0:n]
	b.free = b.free[n:]
	p = append(p, req.Domain)
	for _, e := range d.Entries {
		p = append(p, e.Key, e.Value)
	}
	return p
}

func (s *Service) validate(req *rlv3.RateLimitRequest) error {
	switch {
	case req.Domain == "":
		return fmt.Errorf("%w: rate limit domain must not be empty", errBadRequest)
	case len(req.Domain) > s.cfg.MaxBytes:
		return fmt.Errorf("%w: domain of %d bytes, at most %d", errBadRequest, len(req.Domain), s.cfg.MaxBytes)
	case len(req.Descriptors) == 0:
		return fmt.Errorf("%w: rate limit descriptor list must not be empty", errBadRequest)
	case len(req.Descriptors) > s.cfg.MaxDescriptors:
		return fmt.Errorf("%w: %d descriptors, at most %d", errBadRequest, len(req.Descriptors), s.cfg.MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if d == nil {
			return fmt.Errorf("%w: descriptor %d is null", errBadRequest, i)
		}
		if len(d.Entries) > s.cfg.MaxEntries {
			return fmt.Errorf("%w: descriptor %d has %d entries, at most %d", errBadRequest, i, len(d.Entries), s.cfg.MaxEntries)
		}
		for j, e := range d.Entries {
			switch {
			case e == nil || e.Key == "":
				return fmt.Errorf("%w: descriptor %d entry %d has an empty key", errBadRequest, i, j)
			case len(e.Key) > s.cfg.MaxBytes || len(e.Value) > s.cfg.MaxBytes:
				return fmt.Errorf("%w: descriptor %d entry %d: key or value above %d bytes", errBadRequest, i, j, s.cfg.MaxBytes)
			}
		}
	}
	return nil
}

// answer builds the response from the decisions, as envoyproxy/ratelimit
// does: per-descriptor statuses (shadow mode turns OVER_LIMIT into OK),
// the overall code, and the headers of the descriptor closest to its
// limit (the last one over it, if any).
func (s *Service) answer(req *rlv3.RateLimitRequest, descs []descriptor, checks []pop.Check, out []pop.Decision, now time.Time) (*rlv3.RateLimitResponse, error) {
	resp, sts, lims, durs := newAnswer(len(descs), len(out))
	resp.OverallCode = rlv3.RateLimitResponse_OK
	var closest *rlv3.RateLimitResponse_DescriptorStatus
	var closestReset time.Duration
	minRemaining := uint32(math.MaxUint32)
	for i, ds := range descs {
		st := &sts[i]
		st.Code = rlv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case ds.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case ds.check < 0:
			continue
		}
		d, l := out[ds.check], ds.limit
		if d.Reason == pop.ReasonFailClosed && s.cfg.FailClosedUnavailable {
			return nil, status.Error(codes.Unavailable, "rls: the counter store is unavailable and "+l.FullKey+" fails closed")
		}
		cl := &lims[ds.check]
		cl.Name, cl.RequestsPerUnit, cl.Unit = l.Name, l.RequestsPerUnit, rlv3.RateLimitResponse_RateLimit_Unit(l.Unit)
		st.CurrentLimit = cl
		o := outcomeOf(l, d, ds.hits)
		reset := resetOf(l, o, now)
		dur := &durs[ds.check]
		dur.Seconds, dur.Nanos = int64(reset/time.Second), int32(reset%time.Second) // durationpb.New's
		st.DurationUntilReset = dur
		if o.over {
			st.Code = rlv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(min(o.remaining, math.MaxUint32))
		}
		s.cfg.Stats.descriptor(req.Domain, ds.statsKey, ds.hits, splitHits(o, uint64(l.RequestsPerUnit), uint64(ds.hits), float32(s.cfg.NearLimitRatio), l.ShadowMode))
		if o.over && l.ShadowMode {
			st.Code = rlv3.RateLimitResponse_OK
		}
		if o.over && s.cfg.Events != nil {
			s.emit(req.Domain, l, d, o, checks[ds.check].Parts, reset, now)
		}
		if st.LimitRemaining < minRemaining {
			closest, closestReset, minRemaining = st, reset, st.LimitRemaining
		}
		if st.Code == rlv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT
			closest, closestReset, minRemaining = st, reset, 0
		}
	}
	if s.cfg.Headers && closest != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.cfg.HeaderLimit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.cfg.HeaderRemaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: s.cfg.HeaderReset, Value: strconv.FormatInt(int64(closestReset/time.Second), 10)},
		}
	}
	if resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT && s.cfg.ShadowMode {
		resp.OverallCode = rlv3.RateLimitResponse_OK
		s.cfg.Stats.globalShadow()
	}
	return resp, nil
}

// answerBuf is a response of up to len(sts) descriptors in one
// allocation.
type answerBuf struct {
	resp     rlv3.RateLimitResponse
	statuses [4]*rlv3.RateLimitResponse_DescriptorStatus
	sts      [4]rlv3.RateLimitResponse_DescriptorStatus
	lims     [4]rlv3.RateLimitResponse_RateLimit
	durs     [4]durationpb.Duration
}

// newAnswer is a response with room for n statuses, and m limits and
// durations for them to point to: one allocation for a few descriptors,
// else one per slice (never one per descriptor).
func newAnswer(n, m int) (*rlv3.RateLimitResponse, []rlv3.RateLimitResponse_DescriptorStatus, []rlv3.RateLimitResponse_RateLimit, []durationpb.Duration) {
	if n <= len(answerBuf{}.sts) {
		b := &answerBuf{}
		b.resp.Statuses = b.statuses[:n]
		return &b.resp, b.sts[:n], b.lims[:m], b.durs[:m]
	}
	resp := &rlv3.RateLimitResponse{Statuses: make([]*rlv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]rlv3.RateLimitResponse_DescriptorStatus, n), make([]rlv3.RateLimitResponse_RateLimit, m),
		make([]durationpb.Duration, m)
}

// emit queues the event of an over-limit descriptor of limit l: refused,
// or admitted in shadow mode (the rule's shadow_mode or SHADOW_MODE).
func (s *Service) emit(domain string, l *Limit, d pop.Decision, o outcome, parts []string, reset time.Duration, now time.Time) {
	ev := pop.Event{
		Time: now, Domain: domain, Descriptor: l.FullKey, Policy: d.Policy, Limit: l.Name, Tier: d.Tier,
		IdentityParts: slices.Clone(parts), Decision: pop.EventRefused, Reason: d.Reason, Status: http.StatusTooManyRequests,
		RetryAfter: reset.Seconds(),
	}
	if ev.Limit == "" {
		ev.Limit = o.binding.Limit.Name
	}
	if l.ShadowMode || s.cfg.ShadowMode {
		ev.Decision, ev.Shadow = pop.EventAdmitted, true
	}
	s.cfg.Events.Emit(ev)
}

// outcome is one descriptor's decision as envoyproxy/ratelimit reasons
// about it: over the limit or not, the remaining when not, and the
// window's count before and after the descriptor's hits (its statistics
// split the hits by them).
type outcome struct {
	binding       pop.LimitResult // the result answered from
	over          bool
	remaining     int64
	before, after uint64
}

// outcomeOf reads d for limit l and a request of hits. A shadow_mode rule
// answers by its dry-run result. The counts are exact for a fixed window
// of one limit counted by the store (counter.Result.Count); otherwise,
// and for a rejection replayed from the mitigation cache (the window was
// over already), they are derived from the remaining.
func outcomeOf(l *Limit, d pop.Decision, hits int64) outcome {
	b, over := d.Binding, !d.Allowed
	if l.ShadowMode {
		b = d.ShadowBinding
		over = !d.Allowed || d.Shadow != "" || b.Limit.Quantity > 0 && !b.Result.Allowed
	}
	r, q, h := b.Result, uint64(l.RequestsPerUnit), uint64(hits)
	o := outcome{binding: b, over: over, remaining: max(r.Remaining, 0)}
	switch {
	case b.Limit.Quantity == 0 || d.Reason == pop.ReasonMitigated:
		// A replayed rejection (or nothing consulted: a fail mode).
		if over {
			o.before, o.after = q, q+h
		}
	case l.Fixed > 0 && len(l.Rule.Limits) == 1 && b.Limit.Algorithm == counter.FixedWindow:
		c := uint64(max(r.Count, 0))
		counted := hits > 0 && hits <= b.Limit.Quantity && (r.Allowed || b.Limit.OnReject == counter.Count)
		if counted {
			o.before, o.after = c-min(c, h), c
		} else {
			o.before, o.after = c, c+h
		}
	case over:
		o.before, o.after = q, q+h
	default:
		o.after = q - min(q, uint64(o.remaining))
		o.before = o.after - min(o.after, h)
	}
	return o
}

// hitCounts are a descriptor's hits by statistic.
type hitCounts struct{ within, near, over, shadow uint64 }

// splitHits splits the hits of a descriptor of limit q as
// envoyproxy/ratelimit does: an admission's hits are within_limit, and
// near_limit for the part above the near-limit threshold (⌊q × ratio⌋, in
// float32 as its NEAR_LIMIT_RATIO); a rejection's hits above q are
// over_limit (and shadow_mode in shadow mode), and the ones between the
// threshold and q near_limit.
func splitHits(o outcome, q, hits uint64, ratio float32, shadow bool) hitCounts {
	near := uint64(math.Floor(float64(float32(q) * ratio)))
	var h hitCounts
	if o.over {
		if o.before >= q {
			h.over = hits
		} else {
			h.over = o.after - min(o.after, q)
			h.near = q - max(near, o.before)
		}
		if shadow {
			h.shadow = h.over
		}
		return h
	}
	h.within = hits
	if o.after > near {
		if o.before >= near {
			h.near = hits
		} else {
			h.near = o.after - near
		}
	}
	return h
}

// resetOf is duration_until_reset: for an epoch-aligned fixed window, the
// whole seconds to its end as envoyproxy/ratelimit computes it (window −
// now mod window, in seconds); else the binding limit's Reset (or its
// RetryAfter when over).
func resetOf(l *Limit, o outcome, now time.Time) time.Duration {
	if l.Fixed >= time.Second && l.Fixed%time.Second == 0 {
		sec := int64(l.Fixed / time.Second)
		return time.Duration(sec-now.Unix()%sec) * time.Second
	}
	if l.Fixed > 0 {
		w := int64(l.Fixed)
		return time.Duration(w - now.UnixNano()%w)
	}
	if r := o.binding.Result; o.over && r.RetryAfter > 0 && r.RetryAfter != math.MaxInt64 {
		return r.RetryAfter
	}
	return o.binding.Result.Reset
}
