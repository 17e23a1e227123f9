package pop

// The values of the rate-limit fields, as the client experiences them,
// and the problem+json rejection body.

import (
	"net/http"
	"strconv"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

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
