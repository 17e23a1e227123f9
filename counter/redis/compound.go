package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	results := make([]counter.Result, len(checks))
	if err := s.allowAll(ctx, now, n, checks, results); err != nil {
		return counter.Result{}, nil, err
	}
	return results[counter.Closest(results)], results, nil
}

// allowAll is AllowAll's script call (n ≥ 1, checks not empty); it sets
// out[i] to check i's result.
func (s *Store) allowAll(ctx context.Context, now time.Time, n int64, checks []counter.Check, out []counter.Result) error {
	ca := getCallArgs()
	defer ca.put()
	for i, c := range checks {
		lim, ok := c.Allower.(*Limiter)
		if !ok || lim.s != s {
			return fmt.Errorf("%w: check %d", ErrForeign, i)
		}
		if err := counter.CheckKey(c.Key); err != nil {
			return err
		}
		if i > 0 && HashTag(c.Key) != HashTag(ca.keys[0]) {
			return fmt.Errorf("%w: %q and %q", ErrCrossSlot, ca.keys[0], c.Key)
		}
		units := n
		if c.Cost > 0 {
			units = n * c.Cost
		}
		f := lim.fields
		f[2] = units
		ca.args = append(ca.args, f[:]...)
		ca.keys = append(ca.keys, c.Key)
	}
	rep, err := s.runKeys(ctx, ca.keys, now, ca.args)
	if err != nil {
		return err
	}
	return rep.results(checks, n, out)
}

// callArgs holds the keys and arguments of one script call. go-redis
// copies them into its command, so they are free again once the call
// returns: they are pooled, not allocated per decision.
type callArgs struct {
	keys []string
	args []any // headLen slots, then fieldsPerLimit per limit
}

var callArgsPool = sync.Pool{New: func() any { return &callArgs{args: make([]any, headLen)} }}

func getCallArgs() *callArgs { return callArgsPool.Get().(*callArgs) }

// put clears ca (it must not keep keys or values reachable) and pools it.
func (ca *callArgs) put() {
	clear(ca.keys)
	clear(ca.args)
	ca.keys, ca.args = ca.keys[:0], ca.args[:headLen]
	callArgsPool.Put(ca)
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
	ca := getCallArgs()
	defer ca.put()
	ca.keys = append(ca.keys, key)
	ca.args = append(ca.args, fields...)
	return s.runKeys(ctx, ca.keys, now, ca.args)
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
	cmd := decideCmd(ctx, evalshaHead, keys, args)
	err := s.sc.Process(ctx, cmd)
	if goredis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = decideCmd(ctx, evalHead, keys, args)
		err = s.sc.Process(ctx, cmd)
	}
	raw := cmd.Val()
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

// evalshaHead and evalHead start the decision script's command: EVALSHA
// of its hash, or (the node does not have it yet: NOSCRIPT) EVAL of its
// source, which also loads it. Boxed once: a decision copies them.
var (
	evalshaHead = [2]any{"evalsha", decideScript.Hash()}
	evalHead    = [2]any{"eval", decideSrc}
)

// decideCmd is the decision script's command over keys and args. Its
// reply is read as integers straight into a []int64, unboxed.
func decideCmd(ctx context.Context, head [2]any, keys []string, args []any) *goredis.IntSliceCmd {
	a := make([]any, 0, len(head)+1+len(keys)+len(args))
	a = append(a, head[0], head[1], len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return goredis.NewIntSliceCmd(ctx, a...)
}

// results sets out[i] to check i's Result from the reply.
func (r reply) results(checks []counter.Check, n int64, out []counter.Result) error {
	v := r.vals
	for i, c := range checks {
		lim := c.Allower.(*Limiter) // checked by AllowAll
		units := n
		if checks[i].Cost > 0 {
			units = n * checks[i].Cost
		}
		if len(v) < 2 {
			return fmt.Errorf("%w: short reply", ErrReply)
		}
		allowed := v[0] == 1
		if lim.r.Limit().Algorithm == counter.TokenBucket {
			out[i] = lim.r.BucketResult(r.now.UnixNano()+v[1], r.now, units, allowed)
			v = v[2:]
			continue
		}
		_, nw, _ := lim.r.Window()
		if len(v) < nw+2 {
			return fmt.Errorf("%w: short reply", ErrReply)
		}
		res, err := lim.r.WindowResult(v[1:nw+2], r.now, units, allowed)
		if err != nil {
			return err
		}
		out[i] = res
		v = v[nw+2:]
	}
	return nil
}
