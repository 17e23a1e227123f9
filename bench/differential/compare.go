package differential

import (
	"fmt"
	"math"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Answer is one side's answer to a request: a gRPC error code, or the
// response.
type answer struct {
	Err  codes.Code // codes.OK when Resp is the answer
	Msg  string     // the error's message
	Resp *rlv3.RateLimitResponse
}

// NewAnswer is the answer of a ShouldRateLimit call.
func newAnswer(resp *rlv3.RateLimitResponse, err error) answer {
	if err != nil {
		s := status.Convert(err)
		return answer{Err: s.Code(), Msg: s.Message()}
	}
	return answer{Resp: resp}
}

// String is the answer on one line.
func (a answer) String() string {
	if a.Err != codes.OK {
		return fmt.Sprintf("gRPC %s (%s)", a.Err, a.Msg)
	}
	var b strings.Builder
	b.WriteString(a.Resp.GetOverallCode().String())
	for i, s := range a.Resp.GetStatuses() {
		fmt.Fprintf(&b, " [%d %s rem=%d", i, s.GetCode(), s.GetLimitRemaining())
		if l := s.GetCurrentLimit(); l != nil {
			fmt.Fprintf(&b, " limit=%s/%d/%s", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
		}
		if d := s.GetDurationUntilReset(); d != nil {
			fmt.Fprintf(&b, " reset=%s", d.AsDuration())
		}
		b.WriteString("]")
	}
	return b.String()
}

// Diff is one field on which two answers differ. Desc is the descriptor's
// index, -1 for the response as a whole.
type diff struct {
	Desc      int
	Field     string // grpc_code, overall_code, statuses, code, limit_remaining, current_limit, duration_until_reset
	RLS, Peer string
}

func (d diff) String() string {
	if d.Desc < 0 {
		return fmt.Sprintf("%s: rls %s, peer %s", d.Field, d.RLS, d.Peer)
	}
	return fmt.Sprintf("descriptor %d %s: rls %s, peer %s", d.Desc, d.Field, d.RLS, d.Peer)
}

// ResetTolerance is how far the two duration_until_reset may be apart: the
// two sides read their clocks at different instants (and round to whole
// seconds).
const resetTolerance = time.Second

// Compare lists the fields on which rls's answer differs from the
// peer's: the gRPC code, overall_code, then per descriptor code,
// limit_remaining, current_limit (name, requests_per_unit, unit) and
// duration_until_reset (within ResetTolerance).
func compare(rls, peer answer) []diff {
	if rls.Err != peer.Err {
		return []diff{{Desc: -1, Field: "grpc_code", RLS: rls.Err.String(), Peer: peer.Err.String()}}
	}
	if rls.Err != codes.OK {
		return nil
	}
	var out []diff
	a, b := rls.Resp, peer.Resp
	if a.GetOverallCode() != b.GetOverallCode() {
		out = append(out, diff{Desc: -1, Field: "overall_code", RLS: a.GetOverallCode().String(), Peer: b.GetOverallCode().String()})
	}
	as, bs := a.GetStatuses(), b.GetStatuses()
	if len(as) != len(bs) {
		return append(out, diff{Desc: -1, Field: "statuses", RLS: fmt.Sprint(len(as)), Peer: fmt.Sprint(len(bs))})
	}
	for i := range as {
		x, y := as[i], bs[i]
		if x.GetCode() != y.GetCode() {
			out = append(out, diff{Desc: i, Field: "code", RLS: x.GetCode().String(), Peer: y.GetCode().String()})
		}
		if x.GetLimitRemaining() != y.GetLimitRemaining() {
			out = append(out, diff{Desc: i, Field: "limit_remaining", RLS: fmt.Sprint(x.GetLimitRemaining()), Peer: fmt.Sprint(y.GetLimitRemaining())})
		}
		if lx, ly := limitString(x.GetCurrentLimit()), limitString(y.GetCurrentLimit()); lx != ly {
			out = append(out, diff{Desc: i, Field: "current_limit", RLS: lx, Peer: ly})
		}
		dx, dy := x.GetDurationUntilReset(), y.GetDurationUntilReset()
		if (dx == nil) != (dy == nil) || dx != nil && math.Abs(float64(dx.AsDuration()-dy.AsDuration())) > float64(resetTolerance) {
			out = append(out, diff{Desc: i, Field: "duration_until_reset", RLS: durString(dx.AsDuration(), dx != nil), Peer: durString(dy.AsDuration(), dy != nil)})
		}
	}
	return out
}

func limitString(l *rlv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%d/%s", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
}

func durString(d time.Duration, ok bool) string {
	if !ok {
		return "none"
	}
	return d.String()
}

// Step is what a Deliberate difference is judged on: the request and both
// answers.
type step struct {
	Req       *rlv3.RateLimitRequest
	RLS, Peer answer
}

// Hits is the hits_addend descriptor j counts: its own when set, else the
// request's, at least 1 (both sides' rule).
func (s step) hits(j int) uint64 {
	if h := s.Req.Descriptors[j].GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return uint64(max(1, s.Req.GetHitsAddend()))
}

// Deliberate is a way rls differs from the peer on purpose (README,
// "envoyproxy/ratelimit | rls"), in data: the harness classifies a
// difference as deliberate only when an entry explains it.
type deliberate struct {
	Name   string
	Reason string
	// Explains reports whether the entry accounts for d at step s.
	Explains func(s step, d diff) bool
	// Diverges reports whether descriptor j of step s leaves the two
	// sides' counts of its identity different, by this entry, until its
	// window ends: later differences on that identity in that window are
	// this entry's too.
	Diverges func(s step, j int) bool
}

// deliberates are the deliberate differences the harness knows.
var deliberates = []deliberate{
	{
		Name:   "malformed-request",
		Reason: "an empty domain or descriptor list is gRPC INVALID_ARGUMENT in rls (a client error), UNKNOWN in envoyproxy/ratelimit",
		Explains: func(s step, d diff) bool {
			return d.Field == "grpc_code" && (s.Req.GetDomain() == "" || len(s.Req.GetDescriptors()) == 0) &&
				s.RLS.Err == codes.InvalidArgument && s.Peer.Err == codes.Unknown
		},
	},
	{
		Name: "hits-addend-above-limit",
		Reason: "a hits_addend above requests_per_unit can never pass: rls refuses it without counting it, " +
			"envoyproxy/ratelimit counts it and its window stays over the limit",
		// At the step itself rls's remaining is what it was, the peer's 0.
		Explains: func(s step, d diff) bool {
			return d.Desc >= 0 && d.Field == "limit_remaining" && aboveLimit(s, d.Desc) &&
				s.Peer.Resp.GetStatuses()[d.Desc].GetLimitRemaining() == 0
		},
		Diverges: aboveLimit,
	},
}

// aboveLimit reports whether descriptor j of s counts more hits than the
// requests_per_unit of the limit the peer applied.
func aboveLimit(s step, j int) bool {
	st := s.Peer.Resp.GetStatuses()
	if j >= len(st) || st[j].GetCurrentLimit() == nil {
		return false
	}
	return s.hits(j) > uint64(st[j].GetCurrentLimit().GetRequestsPerUnit())
}
