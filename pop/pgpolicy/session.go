package pgpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/poplimit/poplimit/pop/policy"
)

// session is one connection's life: LISTEN, full read, then notifications
// and periodic re-reads until an error.
func (s *Source) session(ctx context.Context) error {
	pc, err := pgx.ParseConfig(s.cfg.DSN)
	if err != nil {
		return err
	}
	pc.ConnectTimeout = orDur(s.cfg.ConnectTimeout, 2*time.Second)
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil { // a constant: no input in SQL text
		return err
	}
	if err := s.full(ctx, conn); err != nil {
		return err
	}
	s.setConnected(true)
	resync := orDur(s.cfg.Resync, 30*time.Second)
	next := time.Now().Add(resync)
	for {
		wctx, cancel := context.WithDeadline(ctx, next)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			if err := s.full(ctx, conn); err != nil {
				return err
			}
			next = time.Now().Add(resync)
			continue
		case err != nil:
			return err
		}
		batch := []*pgconn.Notification{n}
		batch = s.gather(ctx, conn, batch)
		if err := s.apply(ctx, conn, batch); err != nil {
			return err
		}
	}
}

// gather adds the notifications arriving within Debounce.
func (s *Source) gather(ctx context.Context, conn *pgx.Conn, batch []*pgconn.Notification) []*pgconn.Notification {
	until := time.Now().Add(orDur(s.cfg.Debounce, 20*time.Millisecond))
	for len(batch) < 10000 {
		wctx, cancel := context.WithDeadline(ctx, until)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			return batch
		}
		batch = append(batch, n)
	}
	return batch
}

// notice is a trigger's payload.
type notice struct {
	Table string   `json:"table"`
	Keys  []string `json:"keys"`
}

// apply reads what batch says changed: the listed keys alone when every
// notification names client_api_keys rows, everything otherwise (a tier
// table changed, or a payload did not parse).
func (s *Source) apply(ctx context.Context, conn *pgx.Conn, batch []*pgconn.Notification) error {
	var keys []string
	full := s.base == nil
	for _, n := range batch {
		var p notice
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.Table == "" {
			s.cfg.Metrics.notification("malformed")
			s.log.Warn("policy source: malformed notification, re-reading everything", "payload", fmt.Sprintf("%.80q", n.Payload))
			full = true
			continue
		}
		s.cfg.Metrics.notification("ok")
		if p.Table != "client_api_keys" || len(p.Keys) == 0 {
			full = true
		}
		keys = append(keys, p.Keys...)
	}
	if full {
		return s.full(ctx, conn)
	}
	return s.keyDelta(ctx, conn, keys)
}

// keyDelta re-reads the rows of digests and installs the key table with
// them applied (a digest without a row is deleted).
func (s *Source) keyDelta(ctx context.Context, conn *pgx.Conn, digests []string) error {
	rows, err := conn.Query(ctx, `SELECT api_key, COALESCE(tenant_id::text, ''), COALESCE(policy_id::text, ''), COALESCE(is_active, false)
		FROM client_api_keys WHERE api_key = ANY($1)`, digests)
	if err != nil {
		return err
	}
	krs, err := pgx.CollectRows(rows, scanKey)
	if err != nil {
		return err
	}
	next := maps.Clone(s.keys)
	for _, d := range digests {
		delete(next, d)
	}
	recs, skipped := keyRecords(krs, s.tierByID)
	s.skip(skipped)
	maps.Copy(next, recs)
	f := *s.base
	f.Keys = next
	return s.install(&f, "keys", next)
}

func scanKey(r pgx.CollectableRow) (KeyRow, error) {
	var k KeyRow
	err := r.Scan(&k.Digest, &k.TenantID, &k.PolicyID, &k.Active)
	return k, err
}

// install hands f to the Limiter and records it; an install error keeps
// the previous snapshot (and the source's state) and is not a connection
// error.
func (s *Source) install(f *policy.File, kind string, keys map[string]policy.KeyRecord) error {
	err := s.cfg.Install(f)
	s.cfg.Metrics.load(kind, err)
	if err != nil {
		s.log.Error("policy source: snapshot rejected, keeping the previous one", "err", err)
		return nil
	}
	s.keys = keys
	s.mu.Lock()
	s.origin, s.loadedAt = "database", time.Now()
	s.mu.Unlock()
	s.writeCache(f)
	return nil
}

func (s *Source) skip(sk []Skipped) {
	for _, k := range sk {
		s.cfg.Metrics.skipped(k.Table)
		s.log.Warn("policy source: row skipped", "table", k.Table, "row", k.Row, "reason", k.Reason)
	}
}
