package pop

// Rejection events for the security team's SIEM.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"time"
)

// Event is one rejection, written as a JSON line. It never carries an API
// key in clear: KeyID is its digest.
type Event struct {
	Time       time.Time `json:"time"`
	Policy     string    `json:"policy"`
	Tier       string    `json:"tier,omitempty"`
	Reason     Reason    `json:"reason"`
	Status     int       `json:"status"`
	Limit      string    `json:"limit,omitempty"`
	IP         string    `json:"ip,omitempty"`
	KeyID      string    `json:"key_id,omitempty"`
	Tenant     string    `json:"tenant,omitempty"`
	Route      string    `json:"route,omitempty"`
	RetryAfter float64   `json:"retry_after_s,omitempty"`
	// Shadow: a dry-run limit (Limit) would have rejected this request,
	// which was admitted (Status is the 429 it would have had).
	Shadow bool `json:"shadow,omitempty"`
}

// EventsConfig configures an event queue. Zero means default.
type EventsConfig struct {
	// Queue is the number of events buffered; default 4096. When full, new
	// events are dropped (and counted), never waited for.
	Queue int
	// FlushEvery bounds how long a written event may sit in the buffer;
	// default 1s.
	FlushEvery time.Duration
	// Logger reports the first sink failure (once); default
	// slog.Default().
	Logger *slog.Logger
}

// Events writes rejection events asynchronously to a sink through a bounded
// queue. Emit never blocks. Safe for concurrent use.
type Events struct {
	q       chan Event
	sink    io.Writer
	w       *bufio.Writer
	log     *slog.Logger
	pending uint64 // encoded, not yet flushed (Run's goroutine only)
	failed  bool   // a sink failure was logged (Run's goroutine only)
	flush   time.Duration
	dropped atomic.Uint64
	written atomic.Uint64
	metrics *Metrics
}

// NewEvents returns a queue writing JSON lines to sink once Run is going.
func NewEvents(sink io.Writer, cfg EventsConfig) *Events {
	n := cfg.Queue
	if n <= 0 {
		n = 4096
	}
	f := cfg.FlushEvery
	if f <= 0 {
		f = time.Second
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	return &Events{q: make(chan Event, n), sink: sink, w: bufio.NewWriter(sink), log: lg, flush: f}
}

// Emit queues e, or drops it when the queue is full. A nil *Events drops
// silently.
func (e *Events) Emit(ev Event) {
	if e == nil {
		return
	}
	select {
	case e.q <- ev:
	default:
		e.dropped.Add(1)
		if e.metrics != nil {
			e.metrics.eventsDrop.Inc()
		}
	}
}

// Dropped is the number of events dropped so far: queue full, or lost to
// a sink write error.
func (e *Events) Dropped() uint64 { return e.dropped.Load() }

// Written is the number of events written (flushed) to the sink so far.
func (e *Events) Written() uint64 { return e.written.Load() }

// Run writes queued events until ctx ends, then drains what is queued and
// flushes. Call it once, in its own goroutine. Events lost to a sink write
// error are counted as dropped (the first failure is logged); later events
// are tried again. The error returned is the final flush's.
func (e *Events) Run(ctx context.Context) error {
	enc := json.NewEncoder(e.w)
	t := time.NewTicker(e.flush)
	defer t.Stop()
	write := func(ev Event) {
		if err := enc.Encode(ev); err != nil {
			// The buffer's earlier events are lost with this one.
			e.lost(e.pending+1, err)
			enc = json.NewEncoder(e.w) // an Encoder's error is sticky too
			return
		}
		e.pending++
	}
	for {
		select {
		case ev := <-e.q:
			write(ev)
		case <-t.C:
			e.flushNow()
		case <-ctx.Done():
			for {
				select {
				case ev := <-e.q:
					write(ev)
				default:
					return e.flushNow()
				}
			}
		}
	}
}

// flushNow flushes the buffer, counting its events as written or dropped.
func (e *Events) flushNow() error {
	if err := e.w.Flush(); err != nil {
		e.lost(e.pending, err)
		return err
	}
	e.written.Add(e.pending)
	if e.metrics != nil {
		e.metrics.eventsOut.Add(float64(e.pending))
	}
	e.pending = 0
	return nil
}

// lost counts n events as dropped after a sink error and resets the buffer
// (bufio errors are sticky) so that later events are tried again.
func (e *Events) lost(n uint64, err error) {
	e.dropped.Add(n)
	if e.metrics != nil {
		e.metrics.eventsDrop.Add(float64(n))
	}
	e.pending = 0
	e.w.Reset(e.sink)
	if !e.failed {
		e.failed = true
		e.log.Error("rejection events: sink write failed; dropping and counting lost events", "err", err)
	}
}
