package pop

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
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
}

// EventsConfig configures an event queue. Zero means default.
type EventsConfig struct {
	// Queue is the number of events buffered; default 4096. When full, new
	// events are dropped (and counted), never waited for.
	Queue int
	// FlushEvery bounds how long a written event may sit in the buffer;
	// default 1s.
	FlushEvery time.Duration
}

// Events writes rejection events asynchronously to a sink through a bounded
// queue. Emit never blocks. Safe for concurrent use.
type Events struct {
	q       chan Event
	w       *bufio.Writer
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
	return &Events{q: make(chan Event, n), w: bufio.NewWriter(sink), flush: f}
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

// Dropped is the number of events dropped so far.
func (e *Events) Dropped() uint64 { return e.dropped.Load() }

// Written is the number of events written so far.
func (e *Events) Written() uint64 { return e.written.Load() }

// Run writes queued events until ctx ends, then drains what is queued and
// flushes. Call it once, in its own goroutine.
func (e *Events) Run(ctx context.Context) error {
	enc := json.NewEncoder(e.w)
	t := time.NewTicker(e.flush)
	defer t.Stop()
	write := func(ev Event) {
		if enc.Encode(ev) == nil {
			e.written.Add(1)
			if e.metrics != nil {
				e.metrics.eventsOut.Inc()
			}
		}
	}
	for {
		select {
		case ev := <-e.q:
			write(ev)
		case <-t.C:
			e.w.Flush()
		case <-ctx.Done():
			for {
				select {
				case ev := <-e.q:
					write(ev)
				default:
					return e.w.Flush()
				}
			}
		}
	}
}
