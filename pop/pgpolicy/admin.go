package pgpolicy

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// ErrNotFound reports an admin operation on a tier or key that does not
// exist.
var ErrNotFound = errors.New("pgpolicy: not found")

// ListTiers reads every tier row (with extra limits), by name.
func ListTiers(ctx context.Context, pool *pgxpool.Pool) ([]TierRow, error) {
	var out []TierRow
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) (err error) {
		out, err = readTiers(ctx, tx)
		return err
	})
	return out, err
}

// SetTier creates tier t.TierName or replaces its main limit, route, fail
// mode and extensions, in one transaction; the row must validate as the
// workers would (policy.Parse), so a typo cannot reach them. Its extra limits
// (rate_limit_policy_limits) are left as they are.
func SetTier(ctx context.Context, pool *pgxpool.Pool, t TierRow) error {
	t.Algorithm, t.OnReject, t.Scope = or(t.Algorithm, "sliding_window"), or(t.OnReject, "count"), or(t.Scope, "api_key")
	t.FailMode = or(t.FailMode, "open")
	if _, sk := validTiers([]TierRow{t}, Settings{APIKeyHeader: "X-API-Key"}); len(sk) > 0 {
		return fmt.Errorf("%w: tier %s: %s", pop.ErrInvalidPolicy, t.TierName, sk[0].Reason)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO rate_limit_policies (policy_id, tier_name, route_pattern, window_seconds, max_requests, burst_capacity,
			fail_mode, created_at, algorithm, window_precision, on_reject, scope, is_anonymous)
			VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, now(), $7, $8, $9, $10, $11)
			ON CONFLICT (tier_name) DO UPDATE SET route_pattern = $2, window_seconds = $3, max_requests = $4, burst_capacity = $5,
			fail_mode = $6, algorithm = $7, window_precision = $8, on_reject = $9, scope = $10, is_anonymous = $11`,
			t.TierName, t.RoutePattern, t.WindowSeconds, t.MaxRequests, t.BurstCapacity, t.FailMode, t.Algorithm, t.Precision, t.OnReject, t.Scope, t.IsAnonymous)
		return err
	})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// IssueKey stores key (as its digest) for tenant (a UUID, or "" for none)
// on tier, active, in one transaction; an existing key is moved and
// reactivated.
func IssueKey(ctx context.Context, pool *pgxpool.Pool, key, tenant, tier string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id string
		if err := tx.QueryRow(ctx, `SELECT policy_id::text FROM rate_limit_policies WHERE tier_name = $1`, tier).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: tier %q", ErrNotFound, tier)
			}
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO client_api_keys (api_key, tenant_id, policy_id, is_active) VALUES ($1, NULLIF($2, '')::uuid, $3::uuid, true)
			ON CONFLICT (api_key) DO UPDATE SET tenant_id = NULLIF($2, '')::uuid, policy_id = $3::uuid, is_active = true`, policy.KeyDigest(key), tenant, id)
		return err
	})
}

// SetKeyActive activates or revokes key (by its digest) in one
// transaction. ErrNotFound when no such key is stored.
func SetKeyActive(ctx context.Context, pool *pgxpool.Pool, key string, active bool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE client_api_keys SET is_active = $2 WHERE api_key = $1`, policy.KeyDigest(key), active)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: key %s", ErrNotFound, policy.KeyID(key))
		}
		return err
	})
}
