package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/poplimit/poplimit/counter"
)

// ErrCrossSlot: the keys of one AllowAll call do not share a hash tag, so
// Redis Cluster could not run them in one script (its CROSSSLOT error);
// ErrForeign: a check's Allower is not a Limiter of this Store.
var (
	ErrCrossSlot = errors.New("redis: keys of one call must share a hash tag")
	ErrForeign   = errors.New("redis: check is not a Limiter of this store")
)

// fieldsPerLimit is the number of script arguments per limit.
const fieldsPerLimit = 9

// AllowAll decides a compound rule of one identity in ONE script call,
// atomically: the request of n units passes only if every check admits its
// Cost × n units. The semantics are counter.AllowAll's: every check is
// evaluated; a Count-mode limit is charged whatever the outcome; a
// Refund-mode limit is charged only when the whole rule admits (so no undo,
// and no window in which another worker sees a phantom count). It returns
// the binding result (counter.Closest) and each check's result in order.
//
// Every check's Allower must be a Limiter of s and every key must carry the
// same hash tag (counter.Key's keys for one identity do, whatever the
// limit); else ErrForeign or ErrCrossSlot, before any network call. Two
// checks must not share an algorithm and window on the same key (they
// would share counters; see counter.Key).
func (s *Store) AllowAll(ctx context.Context, now time.Time, n int64, checks ...counter.Check) (counter.Result, []counter.Result, error) {
	if n < 1 {
		return counter.Result{}, nil, counter.ErrBadCost
	}
	if len(checks) == 0 {
		return counter.Result{Allowed: true}, nil, nil
	}
	keys := make([]string, len(checks))
	args := make([]any, headLen, headLen+len(checks)*fieldsPerLimit)
	for i, c := range checks {
		lim, ok := c.Allower.(*Limiter)
		if !ok || lim.s != s {
			return counter.Result{}, nil, fmt.Errorf("%w: check %d", ErrForeign, i)
		}
		if err := counter.CheckKey(c.Key); err != nil {
			return counter.Result{}, nil, err
		}
		if i > 0 && HashTag(c.Key) != HashTag(keys[0]) {
			return counter.Result{}, nil, fmt.Errorf("%w: %q and %q", ErrCrossSlot, keys[0], c.Key)
		}
		units := n
		if c.Cost > 0 {
			units = n * c.Cost
		}
		f := lim.fields
		f[2] = units
		args = append(args, f[:]...)
		keys[i] = c.Key
	}
	rep, err := s.runKeys(ctx, keys, now, args)
	if err != nil {
		return counter.Result{}, nil, err
	}
	results, err := rep.results(checks, n)
	if err != nil {
		return counter.Result{}, nil, err
	}
	return results[counter.Closest(results)], results, nil
}

// HashTag is the part of key Redis Cluster hashes: the text between the
// first '{' and the next '}' when non-empty, else the whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// run is one script call for one limit's fields.
func (s *Store) run(ctx context.Context, key string, now time.Time, fields []any) (reply, error) {
	return s.runKeys(ctx, []string{key}, now, append(make([]any, headLen, headLen+len(fields)), fields...))
}

// headLen is the number of script arguments before the limits' fields
// (now as seconds and nanoseconds, the number of limits).
const headLen = 3

// reply is the script's reply: the now it used (the worker's, or the
// shard's with Config.ServerTime) and the values after it.
type reply struct {
	now  time.Time
	vals []int64
}

// runKeys runs the decision script over keys (one per limit) and args:
// headLen slots it fills, then fieldsPerLimit per limit.
func (s *Store) runKeys(ctx context.Context, keys []string, now time.Time, args []any) (reply, error) {
	args[0], args[1], args[2] = "-", 0, len(keys)
	if !s.cfg.ServerTime {
		ns := now.UnixNano()
		sec := ns / 1e9
		if ns%1e9 < 0 {
			sec--
		}
		args[0], args[1] = sec, ns-sec*1e9
	}
	raw, err := decideScript.Run(ctx, s.sc, keys, args...).Int64Slice()
	if err != nil {
		if errors.Is(err, goredis.Nil) {
			err = ErrReply
		} else if ctx.Err() == nil {
			// A dead master (refused, reset) or CLUSTERDOWN: re-read the
			// slot map at once (coalesced by go-redis) instead of waiting
			// for its periodic reload, so the promoted replica is found.
			s.c.ReloadState(ctx)
		}
		return reply{}, fmt.Errorf("redis: decide %s: %w", keys[0], err)
	}
	if !s.cfg.ServerTime {
		return reply{now: now, vals: raw}, nil
	}
	if len(raw) < 2 {
		return reply{}, fmt.Errorf("%w: %d values", ErrReply, len(raw))
	}
	return reply{now: time.Unix(raw[0], raw[1]), vals: raw[2:]}, nil
}

// results turns the reply into each check's Result.
func (r reply) results(checks []counter.Check, n int64) ([]counter.Result, error) {
	out := make([]counter.Result, len(checks))
	v := r.vals
	for i, c := range checks {
		lim := c.Allower.(*Limiter) // checked by AllowAll
		units := n
		if checks[i].Cost > 0 {
			units = n * checks[i].Cost
		}
		if len(v) < 2 {
			return nil, fmt.Errorf("%w: short reply", ErrReply)
		}
		allowed := v[0] == 1
		if lim.r.Limit().Algorithm == counter.TokenBucket {
			out[i] = lim.r.BucketResult(r.now.UnixNano()+v[1], r.now, units, allowed)
			v = v[2:]
			continue
		}
		_, nw, _ := lim.r.Window()
		if len(v) < nw+2 {
			return nil, fmt.Errorf("%w: short reply", ErrReply)
		}
		res, err := lim.r.WindowResult(v[1:nw+2], r.now, units, allowed)
		if err != nil {
			return nil, err
		}
		out[i] = res
		v = v[nw+2:]
	}
	return out, nil
}
