package policy

import (
	"errors"
	"strings"
	"testing"
)

// TestLimitFieldErrors: a bad dry-run, concurrency, count-by-response or
// mitigation field is a policy error naming file, line and field.
func TestLimitFieldErrors(t *testing.T) {
	for _, c := range []struct{ limit, field, msg string }{
		{"{name: c, algorithm: concurrency, quantity: 0}", "limits[0].quantity", "must be ≥ 1"},
		{"{name: c, algorithm: concurrency, quantity: 5, window: 1s}", "limits[0].window", "concurrency limit has no window"},
		{"{name: c, quantity: 5, window: 1s, max_request_time: 1s}", "limits[0].max_request_time", "only a concurrency limit"},
		{"{name: c, quantity: 5, window: 1s, count_if: {status: [700]}}", "limits[0].count_if.status[0]", "impossible HTTP status"},
		{"{name: c, quantity: 5, window: 1s, count_if: {status: [\"500-400\"]}}", "limits[0].count_if.status[0]", "empty status range"},
		{"{name: c, quantity: 5, window: 1s, count_if: {status: [abc]}}", "limits[0].count_if.status[0]", "must be a status"},
		{"{name: c, quantity: 5, window: 1s, count_if: {}}", "limits[0].count_if.status", "required"},
		{"{name: c, quantity: 5, window: 1s, cost_header: {name: X-Cost, max: 3, default: 4}}", "limits[0].cost_header.default", "exceeds max"},
		{"{name: c, quantity: 5, window: 1s, cost_header: {name: X-Cost, max: -1}}", "limits[0].cost_header.max", "must be ≥ 1"},
		{"{name: c, quantity: 5, window: 1s, cost_header: {max: 3}}", "limits[0].cost_header.name", "required"},
		{"{name: c, quantity: 5, window: 1s, mitigation_timeout: soon}", "limits[0].mitigation_timeout", "duration"},
		{"{name: c, quantity: 5, window: 1s, shadow: maybe}", "limits[0].shadow", "true or false"},
	} {
		doc := "version: 1\ntiers:\n  t:\n    limits:\n      - " + c.limit + "\npolicies:\n  - {name: p, routes: [\"/x\"], tier: t}\n"
		_, err := Parse("bad.yml", []byte(doc))
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: err %v, want a ValidationError", c.limit, err)
			continue
		}
		found := false
		for _, e := range unjoin(err) {
			if errors.As(e, &ve) && ve.File == "bad.yml" && ve.Line == 5 && ve.Field == "tiers.t."+c.field && strings.Contains(ve.Msg, c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %v; want bad.yml:5: tiers.t.%s: ...%s...", c.limit, err, c.field, c.msg)
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
