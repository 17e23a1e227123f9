package pgpolicy

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// full reads every table in one repeatable-read transaction and installs
// the snapshot they make.
func (s *Source) full(ctx context.Context, conn *pgx.Conn) error {
	var tiers []TierRow
	var keys []KeyRow
	st := Settings{APIKeyHeader: "X-API-Key", UnknownKey: "anonymous"}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if tiers, err = readTiers(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT api_key, COALESCE(tenant_id::text, ''), COALESCE(policy_id::text, ''), COALESCE(is_active, false) FROM client_api_keys`)
		if err != nil {
			return err
		}
		if keys, err = pgx.CollectRows(rows, scanKey); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT api_key_header, unknown_key FROM poplimit_settings LIMIT 1`).Scan(&st.APIKeyHeader, &st.UnknownKey)
		if err == pgx.ErrNoRows {
			err = nil
		}
		return err
	})
	if err != nil {
		return err
	}
	valid, skipped := validTiers(tiers, st)
	s.skip(skipped)
	tierByID := make(map[string]string, len(valid))
	for _, t := range valid {
		tierByID[t.PolicyID] = t.TierName
	}
	doc, err := document(valid, st)
	if err != nil {
		return err
	}
	base, err := compileFile("postgres", valid, st)
	if err != nil {
		// Every row compiled alone: only their combination (conflicting
		// route patterns) can fail here. Keep the previous snapshot.
		s.cfg.Metrics.load("full", err)
		s.log.Error("policy source: tiers rejected together, keeping the previous snapshot", "err", err)
		return nil
	}
	base.KeyDigests = true
	base.RejectUnknownKeys = st.UnknownKey == "reject"
	recs, kskipped := keyRecords(keys, tierByID)
	s.skip(kskipped)
	s.base, s.tierByID, s.doc, s.st = base, tierByID, doc, st
	f := *base
	f.Keys = recs
	return s.install(&f, "full", recs)
}

// readTiers reads rate_limit_policies with their extra limits. NULL
// design columns read as zero (a zero limit is then skipped by
// validation).
func readTiers(ctx context.Context, tx pgx.Tx) ([]TierRow, error) {
	rows, err := tx.Query(ctx, `SELECT policy_id::text, COALESCE(tier_name, ''), COALESCE(route_pattern, ''), COALESCE(window_seconds, 0),
		COALESCE(max_requests, 0), COALESCE(burst_capacity, 0), COALESCE(fail_mode, 'open'), algorithm, window_precision, on_reject, scope, is_anonymous
		FROM rate_limit_policies ORDER BY tier_name`)
	if err != nil {
		return nil, err
	}
	tiers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TierRow, error) {
		var t TierRow
		err := r.Scan(&t.PolicyID, &t.TierName, &t.RoutePattern, &t.WindowSeconds, &t.MaxRequests, &t.BurstCapacity, &t.FailMode,
			&t.Algorithm, &t.Precision, &t.OnReject, &t.Scope, &t.IsAnonymous)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT policy_id::text, limit_name, algorithm, COALESCE(window_seconds, 0), COALESCE(max_requests, 0),
		COALESCE(burst_capacity, 0), window_precision, on_reject FROM rate_limit_policy_limits ORDER BY policy_id, limit_name`)
	if err != nil {
		return nil, err
	}
	byID := map[string]int{}
	for i, t := range tiers {
		byID[t.PolicyID] = i
	}
	var id string
	var l LimitRow
	_, err = pgx.ForEachRow(rows, []any{&id, &l.Name, &l.Algorithm, &l.WindowSeconds, &l.MaxRequests, &l.BurstCapacity, &l.Precision, &l.OnReject}, func() error {
		if i, ok := byID[id]; ok {
			tiers[i].Extra = append(tiers[i].Extra, l)
		}
		return nil
	})
	return tiers, err
}
