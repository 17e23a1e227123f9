package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// Warmer is implemented by backends that can open their connections before
// they take traffic (Pool). A reload warms the Router it builds before
// requests switch to it, so the first requests of a shard, new or kept, do
// not wait for a connect or count its delay against their timeout.
type Warmer interface {
	// Warm opens every connection and checks that the shard answers on
	// each, bounded by the backend's request timeout and ctx. Failures are
	// returned, not reported to the shard's health: the requests that
	// follow meet the shard as it is and count.
	Warm(ctx context.Context) error
}

var _ Warmer = (*Pool)(nil)

// versionReq is the request Warm sends on each connection.
var versionReq = protocol.Request{Cmd: protocol.CmdVersion}

// Warm sends "version" on every connection of the pool, through its own
// writer and reader (so it dials them) and waits for the replies. The
// pool's request timeout bounds each; a failure does not feed OnFailure
// (see Warmer).
func (p *Pool) Warm(ctx context.Context) error {
	p.warming.Add(1)
	defer p.warming.Add(-1)
	calls := make([]*Call, len(p.conns))
	for k := range calls {
		c := NewCall()
		c.Req, c.Conn = &versionReq, uint64(k)
		calls[k] = c
		p.Do(c)
	}
	var errs []error
	for _, c := range calls {
		select {
		case <-c.Done():
		case <-ctx.Done():
			return ctx.Err() // the calls still pending finish by the pool's timeout
		}
		if c.Err != nil {
			errs = append(errs, c.Err)
		} else if !bytes.HasPrefix(c.Reply, []byte("VERSION ")) {
			errs = append(errs, fmt.Errorf("%w: %q", protocol.ErrBadReply, protocol.FirstLine(c.Reply)))
		}
	}
	return errors.Join(errs...)
}

// Warm warms every backend that is a Warmer, all at once, and returns
// their failures by shard (nil: all answered). A shard that fails stays on
// the ring: its health decides from the requests that follow.
func (r *Router) Warm(ctx context.Context) map[int]error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs map[int]error
	)
	for i, b := range r.backends {
		w, ok := b.(Warmer)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Warm(ctx); err != nil {
				mu.Lock()
				if errs == nil {
					errs = map[int]error{}
				}
				errs[i] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}
