package pop

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// storeCtx is the context of one decision's store calls: the request's
// context bounded by the store deadline, without what context.WithTimeout
// costs on every decision (three allocations and a runtime timer set and
// stopped). Deadline and Err answer from the clock; the Done channel, and
// its timer, are made only for a store that waits on it (PipeStore with
// Multiplex). Stores must not keep it past the call (none does).
type storeCtx struct {
	context.Context
	deadline time.Time

	once     sync.Once
	done     <-chan struct{}
	cancel   context.CancelFunc
	released atomic.Bool // set before release closes done
}

func newStoreCtx(parent context.Context, deadline time.Time) *storeCtx {
	return &storeCtx{Context: parent, deadline: deadline}
}

// Deadline is the earlier of the parent's and the store deadline.
func (c *storeCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done is closed when the parent is done or the deadline passes.
func (c *storeCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		var ctx context.Context
		ctx, c.cancel = context.WithDeadline(c.Context, c.deadline)
		c.done = ctx.Done()
	})
	return c.done
}

// Err is the parent's error, else context.DeadlineExceeded once the
// deadline has passed, else context.Canceled once released (Done is then
// closed, and a closed Done must come with an error: a context derived
// from this one, e.g. by a dial, still alive at release would otherwise
// cancel itself with no error, which panics).
func (c *storeCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.released.Load() {
		if !time.Now().Before(c.deadline) {
			return context.DeadlineExceeded
		}
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// release stops Done's timer, if one was made.
func (c *storeCtx) release() {
	c.released.Store(true)
	if c.cancel != nil {
		c.cancel()
	}
}
