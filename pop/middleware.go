package pop

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Middleware puts the limiter in front of next: every limited response
// carries the rate-limit headers selected by the policy file; a rejection
// is answered here (429 for a quota, 503 when the limiter is unhealthy and
// the policy fails closed) and never reaches next.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := l.Decide(r.Context(), r, l.clock())
		WriteHeaders(w.Header(), d, l.Headers())
		if !d.Allowed {
			WriteRejection(w, d)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ceilSeconds rounds a duration up to whole seconds (a client that waits
// that long is never early).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// WriteHeaders sets the rate-limit fields of d on h:
//
//   - seed: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (seconds)
//     of the binding limit (the one closest to exhaustion);
//   - draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy lists every
//     limit of the rule as `"name";q=Q;w=W`, and RateLimit reports the
//     binding one as `"name";r=R;t=T`.
//
// Nothing is written when d consulted no limit.
func WriteHeaders(h http.Header, d Decision, mode HeaderMode) {
	if !d.limited() || mode == HeadersNone {
		return
	}
	res := d.Binding.Result
	lim := res.Limit
	if lim == 0 {
		lim = d.Binding.Limit.Quantity
	}
	reset := ceilSeconds(res.Reset)
	// One backing array for every header value slice.
	vals := make([]string, 5)
	set := func(i int, k, v string) {
		vals[i] = v
		h[k] = vals[i : i+1 : i+1]
	}
	if mode == HeadersBoth || mode == HeadersSeed {
		set(0, "Ratelimit-Limit", strconv.FormatInt(lim, 10))
		set(1, "Ratelimit-Remaining", strconv.FormatInt(res.Remaining, 10))
		set(2, "Ratelimit-Reset", strconv.FormatInt(reset, 10))
	}
	if mode == HeadersBoth || mode == HeadersDraft11 {
		var b strings.Builder
		if d.policyField != "" {
			set(3, "Ratelimit-Policy", d.policyField)
		} else {
			all := d.All
			if len(all) == 0 {
				all = []LimitResult{d.Binding}
			}
			for i, lr := range all {
				if i > 0 {
					b.WriteString(", ")
				}
				q := lr.Result.Limit
				if q == 0 {
					q = lr.Limit.Quantity
				}
				writePolicyItem(&b, lr.Limit.Name, q, lr.Limit.Window)
			}
			set(3, "Ratelimit-Policy", b.String())
			b.Reset()
		}
		b.WriteString(sfString(d.Binding.Limit.Name))
		b.WriteString(";r=")
		b.WriteString(strconv.FormatInt(res.Remaining, 10))
		b.WriteString(";t=")
		b.WriteString(strconv.FormatInt(reset, 10))
		set(4, "Ratelimit", b.String())
	}
}

func writePolicyItem(b *strings.Builder, name string, q int64, w time.Duration) {
	b.WriteString(sfString(name))
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(q, 10))
	b.WriteString(";w=")
	ws := ceilSeconds(w)
	if ws < 1 {
		ws = 1
	}
	b.WriteString(strconv.FormatInt(ws, 10))
}

// sfString encodes s as an RFC 8941 sf-string.
func sfString(s string) string {
	if s == "" {
		s = "default"
	}
	if !strings.ContainsAny(s, `"\`) {
		return `"` + s + `"`
	}
	return strconv.Quote(s)
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
	if status == http.StatusServiceUnavailable {
		msg = "rate_limiter_unavailable"
	}
	n := strconv.FormatInt(ra, 10)
	h := w.Header()
	h["Retry-After"] = []string{n}
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write([]byte(`{"error":"` + msg + `","retry_after":` + n + "}\n"))
}
