package pop

import (
	"github.com/poplimit/poplimit/pop/policy"
	"net/http"
	"strconv"
	"strings"
	"time"
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
