package pop

// Step 5, the answer: the HTTP middleware, the RateLimit-* fields and
// Retry-After, and the rejection bodies (429, 503, key refusals).

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// Middleware puts the limiter in front of next: every limited response
// carries the rate-limit headers selected by the policy file; a rejection
// is answered here (429 for a quota, 503 when the limiter is unhealthy and
// the policy fails closed) and never reaches next. next receives the
// request with its path in the canonical form it was matched by
// (Normalize): the upstream reads the path that was limited. When next
// returns (response written, client gone, upstream failed, or a panic),
// the decision is finished (Limiter.Finish) with the status written (499
// if the client went away before any), which
// releases concurrency slots and counts by response. A request a dry-run
// limit would have rejected gets X-RateLimit-Shadow with the policy
// file's shadow_header.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = l.Normalize(r)
		d := l.Decide(r.Context(), r, l.clock())
		WriteHeaders(w.Header(), d, l.Headers())
		if !d.Allowed {
			writeRejection(w, d, l.bodyFormat())
			return
		}
		if d.Shadow != "" && l.shadowHeader() {
			w.Header().Set(ShadowHeader, d.Shadow)
		}
		if d.done == nil {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() { l.Finish(r.Context(), d, l.clock(), sw.finalStatus(r), sw.Header()) }()
		next.ServeHTTP(sw, r)
	})
}

// shadowHeader reports the current policy file's shadow_header.
func (l *Limiter) shadowHeader() bool {
	s := l.snap.Load()
	return s != nil && s.file.ShadowHeader
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through (streaming responses), as does Unwrap for
// http.ResponseController.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finalStatus is the status the request ended with: the one written, 499
// when the client went away before any, else 200 (net/http's implicit
// answer to a handler that wrote nothing).
func (w *statusWriter) finalStatus(r *http.Request) int {
	switch {
	case w.status != 0:
		return w.status
	case r.Context().Err() != nil:
		return statusClientClosed
	}
	return http.StatusOK
}

// ceilSeconds rounds a duration up to whole seconds (a client that waits
// that long is never early).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	// Divide then round: adding a second first would overflow for
	// counter.Never (a request that can never pass).
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// WriteHeaders sets the rate-limit fields of d on h:
//
//   - seed: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (seconds)
//     of the binding limit (the one closest to exhaustion);
//   - draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy lists every
//     limit of the rule as `"name";q=Q;w=W`, and RateLimit reports the
//     binding one as `"name";r=R;t=T`.
//
// Every value is what the client experiences: Limit and q are the units
// one can spend at once (a token bucket's burst), W the window they refill
// in (a bucket's burst × emission interval, a calendar window's true
// length); R the units left; RateLimit-Reset and T the seconds within
// which no more than R can pass (until the next unit is available; when
// refused, until the request may pass), never more than the window
// (effectiveWindow).
//
// Nothing is written when d consulted no limit.
func WriteHeaders(h http.Header, d Decision, mode policy.HeaderMode) {
	if !d.limited() || mode == policy.HeadersNone {
		return
	}
	res := d.Binding.Result
	lim := res.Limit
	if lim == 0 {
		lim = d.Binding.Limit.Quantity
	}
	reset := seconds(effectiveWindow(d.Binding))
	seed := mode == policy.HeadersBoth || mode == policy.HeadersSeed
	draft := mode == policy.HeadersBoth || mode == policy.HeadersDraft11
	// Every value is appended to one buffer, turned into one string and
	// sliced: two allocations per response (that string and the backing
	// array of the header value slices) whatever the mode.
	var arr [192]byte
	b := arr[:0]
	var end [5]int // end offset of value i in b; value i starts at end[i-1]
	if seed {
		b = strconv.AppendInt(b, lim, 10)
		end[0] = len(b)
		b = strconv.AppendInt(b, res.Remaining, 10)
		end[1] = len(b)
		b = strconv.AppendInt(b, reset, 10)
		end[2] = len(b)
	}
	if draft {
		if d.policyField == "" {
			if len(d.All) == 0 {
				b = appendPolicyField(b, []LimitResult{d.Binding})
			} else {
				b = appendPolicyField(b, d.All)
			}
		}
		end[3] = len(b)
		b = appendSFString(b, d.Binding.Limit.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, res.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, reset, 10)
		end[4] = len(b)
	}
	str := string(b)
	val := func(i int) string {
		if i == 0 {
			return str[:end[0]]
		}
		return str[end[i-1]:end[i]]
	}
	// One backing array for every header value slice.
	vals := make([]string, 5)
	set := func(i int, k, v string) {
		vals[i] = v
		h[k] = vals[i : i+1 : i+1]
	}
	if seed {
		set(0, "Ratelimit-Limit", val(0))
		set(1, "Ratelimit-Remaining", val(1))
		set(2, "Ratelimit-Reset", val(2))
	}
	if draft {
		if d.policyField != "" {
			set(3, "Ratelimit-Policy", d.policyField)
		} else {
			set(3, "Ratelimit-Policy", val(3))
		}
		set(4, "Ratelimit", val(4))
	}
}

// appendPolicyField appends the draft-11 RateLimit-Policy value of
// limits, the one encoder of that field (a rule's is built once, at
// compile, unless it has calendar windows): `"name";q=Q;w=W` per limit,
// comma separated. Q is the allowance the count reported (Result.Limit),
// or, for a limit not consulted, the one it is configured with
// (policy.Allowance: a token bucket's burst); W is the window (windowOf: a
// bucket's time to refill Q, a calendar window's true length) in whole
// seconds, rounded up, at least 1.
func appendPolicyField(b []byte, limits []LimitResult) []byte {
	for i, lr := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		q := lr.Result.Limit
		if q == 0 {
			q = policy.Allowance(lr.Limit)
		}
		b = appendSFString(b, lr.Limit.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, q, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(seconds(windowOf(lr)), 1), 10)
	}
	return b
}

// appendSFString appends s as an RFC 8941 sf-string ("default" for "").
func appendSFString(b []byte, s string) []byte {
	if s == "" {
		s = "default"
	}
	if !strings.ContainsAny(s, `"\`) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return strconv.AppendQuote(b, s)
}

// WriteRejection answers a rejected decision: Retry-After in whole seconds
// (rounded up, at least 1) and a JSON body
// {"error":"rate_limit_exceeded","retry_after":N} with status 429, or
// {"error":"rate_limiter_unavailable","retry_after":N} with 503.
func WriteRejection(w http.ResponseWriter, d Decision) {
	ra := ceilSeconds(d.RetryAfter())
	if ra < 1 {
		ra = 1
	}
	status := d.Status
	if status == 0 {
		status = http.StatusTooManyRequests
	}
	msg := "rate_limit_exceeded"
	switch status {
	case http.StatusServiceUnavailable:
		msg = "rate_limiter_unavailable"
	case http.StatusForbidden, http.StatusUnauthorized:
		// Not a quota answer: retrying will not help, no Retry-After.
		writeKeyRejection(w, status)
		return
	}
	n := strconv.FormatInt(ra, 10)
	h := w.Header()
	h["Retry-After"] = []string{n}
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write([]byte(`{"error":"` + msg + `","retry_after":` + n + "}\n"))
}

// writeKeyRejection answers a key check's refusal: 403
// {"error":"api_key_inactive"} or 401 {"error":"api_key_unknown"}.
func writeKeyRejection(w http.ResponseWriter, status int) {
	msg := "api_key_inactive"
	if status == http.StatusUnauthorized {
		msg = "api_key_unknown"
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write([]byte(`{"error":"` + msg + `"}` + "\n"))
}

// The values of the rate-limit fields, as the client experiences them,
// and the problem+json rejection body.

// Problem types of draft-ietf-httpapi-ratelimit-headers (section 5).
const (
	ProblemQuotaExceeded         = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity       = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	titleQuotaExceeded           = "Request cannot be satisfied as assigned quota has been exceeded"
	titleReducedCapacity         = "Request cannot be satisfied due to temporary server capacity constraints"
	problemContentType           = "application/problem+json"
	nominalMonth                 = 30 * 24 * time.Hour
	nominalYear                  = 365 * 24 * time.Hour
	nominalWeek                  = 7 * 24 * time.Hour
	nominalDay                   = 24 * time.Hour
	secondsCap             int64 = 1 << 40 // far beyond any window; keeps sf-integers small
)

// windowOf is the length of the window lr's answer is about: what the
// count reported (a calendar window's true length, a token bucket's time
// to refill its burst), or for a limit not consulted the configured one
// (a calendar unit's nominal length, a bucket's burst × emission
// interval).
func windowOf(lr LimitResult) time.Duration {
	if w := lr.Result.Window; w > 0 {
		return w
	}
	l := lr.Limit
	switch l.Calendar.Unit {
	case counter.Day:
		return nominalDay
	case counter.Week:
		return nominalWeek
	case counter.Month:
		return nominalMonth
	case counter.Year:
		return nominalYear
	}
	if l.Algorithm == counter.TokenBucket && l.Quantity > 0 {
		t := (l.Window + time.Duration(l.Quantity) - 1) / time.Duration(l.Quantity)
		return t * time.Duration(policy.Allowance(l))
	}
	return l.Window
}

// effectiveWindow is the draft's t of lr (and the seed's RateLimit-Reset):
// the time within which the client can use no more than the Remaining it
// is told. Refused: until the request may pass (RetryAfter, whatever the
// window: the seed draft's RateLimit-Reset "SHOULD reference the same
// point in time as" Retry-After, and draft 11's Retry-After "SHOULD NOT
// reference a point in time earlier than the end of the effective
// window"). Otherwise until the next unit is available (Result.Next;
// Reset for a result that has none), never more than the window.
func effectiveWindow(lr LimitResult) time.Duration {
	res := lr.Result
	if !res.Allowed && res.RetryAfter > 0 && res.RetryAfter != counter.Never {
		return res.RetryAfter
	}
	t := res.Next
	if t <= 0 {
		t = res.Reset
	}
	return min(t, windowOf(lr))
}

// seconds rounds d up to whole seconds, capped.
func seconds(d time.Duration) int64 { return min(ceilSeconds(d), secondsCap) }

// writeRejection answers a rejected decision with body format f.
func writeRejection(w http.ResponseWriter, d Decision, f policy.BodyFormat) {
	if f != policy.BodyProblem {
		WriteRejection(w, d)
		return
	}
	ra := max(ceilSeconds(d.RetryAfter()), 1)
	status := d.Status
	if status == 0 {
		status = http.StatusTooManyRequests
	}
	typ, title := ProblemQuotaExceeded, titleQuotaExceeded
	if status == http.StatusServiceUnavailable {
		typ, title = ProblemReducedCapacity, titleReducedCapacity
	}
	n := strconv.FormatInt(ra, 10)
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","title":"`...)
	b = append(b, title...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	if names := violated(d); len(names) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, name := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, name)
		}
		b = append(b, ']')
	}
	b = append(b, `,"retry_after":`...)
	b = append(b, n...)
	b = append(b, "}\n"...)
	h := w.Header()
	h["Retry-After"] = []string{n}
	h["Content-Type"] = []string{problemContentType}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write(b)
}

// violated names the limits that refused d (the draft's
// "violated-policies"): every consulted limit that refused, else the
// binding one; none for a 503 (no quota was exceeded: the limiter could
// not count).
func violated(d Decision) []string {
	if d.Status == http.StatusServiceUnavailable {
		return nil
	}
	var names []string
	for _, lr := range d.All {
		if !lr.Result.Allowed && lr.Result.Limit > 0 {
			names = append(names, limitName(lr.Limit.Name))
		}
	}
	if len(names) == 0 && (d.Binding.Limit.Name != "" || d.Binding.Limit.Quantity > 0) {
		names = append(names, limitName(d.Binding.Limit.Name))
	}
	return names
}

// limitName is the name a limit goes by in fields and bodies.
func limitName(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// hasCalendar reports whether any of lrs is a calendar window.
func hasCalendar(lrs []LimitResult) bool {
	for _, lr := range lrs {
		if lr.Limit.Calendar.Unit != counter.NoCalendar {
			return true
		}
	}
	return false
}

// bodyFormat is the current policy file's rejection_body.
func (l *Limiter) bodyFormat() policy.BodyFormat {
	if s := l.snap.Load(); s != nil {
		return s.file.RejectionBody
	}
	return policy.BodyJSON
}
