package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/pgpolicy"
)

// policySource wires --policy-source: the limiter's snapshot comes from
// PostgreSQL (pop/pgpolicy) instead of --policy's file.
type policySource struct {
	src atomic.Pointer[pgpolicy.Source]
}

// healthReasons adds the source's reasons to next's.
func (p *policySource) healthReasons(next func() []string) func() []string {
	return func() []string {
		var out []string
		if next != nil {
			out = next()
		}
		if s := p.src.Load(); s != nil {
			out = append(out, s.HealthReasons()...)
		}
		return out
	}
}

// start serves the cached snapshot if there is one, runs the source until
// ctx ends (done closes then) and waits for the database's snapshot up to
// 10 s (2 s when the cache serves meanwhile).
// Without any (no cache, database unreachable) edge still starts, limits
// nothing, and /healthz says failing until one arrives.
func (p *policySource) start(ctx context.Context, c *cli.Context, limiter *pop.Limiter, reg *prometheus.Registry, logger *slog.Logger) (<-chan struct{}, error) {
	if c.String("policy") != "" {
		return nil, errors.New("--policy and --policy-source: give one")
	}
	m, err := pgpolicy.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	s, err := pgpolicy.New(pgpolicy.Config{DSN: c.String("policy-source"), Install: limiter.LoadPolicy, CachePath: c.String("policy-cache"),
		Resync: c.Duration("policy-resync"), Metrics: m, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--policy-source: %w", err)
	}
	p.src.Store(s)
	if err := s.LoadCache(); err != nil && !errors.Is(err, pgpolicy.ErrNoCache) {
		logger.Warn("policy cache not served", "err", err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	wait := 10 * time.Second
	if limiter.Loaded() {
		wait = 2 * time.Second // the cache serves meanwhile
	}
	deadline := time.Now().Add(wait)
	for len(s.HealthReasons()) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if !limiter.Loaded() {
		logger.Error("no policy yet: PostgreSQL unreachable and no cached snapshot; requests are not limited until one loads")
	}
	return done, nil
}
