package pop

// Dry run (shadow mode): a limit, a policy or the whole Limiter
// (Config.Shadow, edge --shadow) counts and decides as usual, but a
// request only dry-run limits would reject is admitted. The dry-run
// limits of a rule are counted together (counter.AllowAll, as if they were
// the rule), apart from the enforcing ones, with the same mitigation cache
// logic under their own entries: a dry run's would-be rejections are the
// rejections the same limits would make enforcing, on the same traffic.
// They are reported by Decision.Shadow, the poplimit_shadow_rejections_total
// metric, a rejection event with "shadow": true, and, with the policy
// file's shadow_header, an X-RateLimit-Shadow response header. Dry-run
// limits write no RateLimit-* headers and never reject in a fail mode.
// Promoting a limit to enforcing is a reload: its counts live in the store
// under the same keys (they derive from the identity, algorithm and
// window, not from shadow), so it enforces from the count the dry run
// reached.

import (
	"context"
	"time"
)

// ShadowHeader is the response header naming the dry-run limit that would
// have rejected the request (policy file: shadow_header: true).
const ShadowHeader = "X-RateLimit-Shadow"

// shadowPass counts the dry-run limits of rs for an admitted or rejected
// d and records in d.Shadow the one that would have rejected an admitted
// request. A store error leaves d alone: a dry run never changes a
// decision.
func (l *Limiter) shadowPass(ctx context.Context, p *compiledPolicy, rs *rules, keys []string, mitKey string, fl flags, d *Decision, now time.Time) {
	if e, ok := p.mit.get(mitKey+flagShadow, now); ok && e.tier == rs.tier {
		if d.Allowed {
			d.Shadow = e.binding.Limit.Name
		}
		return
	}
	if fl.shadowUntil.After(now) {
		if d.Allowed {
			d.Shadow = fl.shadowLimit
		}
		return
	}
	sd, err := l.count(ctx, rs, keys, now, true)
	if err != nil {
		l.cfg.Metrics.shadowError(p.spec.Name)
		return
	}
	d.ShadowBinding = sd.Binding
	if sd.Allowed {
		return
	}
	if sd.Binding.Result.RetryAfter > 0 {
		l.remember(ctx, p, rs, mitKey, flagShadow, sd, now)
	}
	if d.Allowed {
		d.Shadow = sd.Binding.Limit.Name
	}
}
