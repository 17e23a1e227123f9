package pop

// Rejection events for the security team's SIEM.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/pop/policy"
)

// EventSchemaVersion is the "v" of every event written. Adding a field
// keeps it; removing, renaming or retyping one raises it.
const EventSchemaVersion = 1

// Decision values of an Event.
const (
	EventRefused  = "refused"  // the request was refused (edge 429/503, rls OVER_LIMIT)
	EventAdmitted = "admitted" // a dry run: admitted, but a shadow limit would have refused it
)

// Identity kinds of an Event.
const (
	IdentityAPIKey     = "api_key"    // Identity is the API key's KeyID
	IdentityIP         = "ip"         // Identity digests ClientNet
	IdentityDescriptor = "descriptor" // rls: Identity digests the domain and descriptor entries
)

// Event is one refusal, or one dry run's would-be refusal: the event
// schema, version EventSchemaVersion, the same for every sink (one JSON
// object; a JSON line for a file). It never carries an API key or a
// descriptor value in clear: Identity and KeyID are digests (the first
// 12 bytes of a SHA-256, hex).
//
// The fields Run stamps (V, Seq, PoP, Worker, and Identity when it is
// derived) are overwritten; the caller sets the others at decision time.
type Event struct {
	V          int       `json:"v"`                    // EventSchemaVersion
	Time       time.Time `json:"time"`                 // the decision instant
	Seq        uint64    `json:"seq"`                  // per worker, from 1, increasing: a gap is an event dropped after the queue
	PoP        string    `json:"pop,omitempty"`        // EventsConfig.PoP
	Worker     string    `json:"worker,omitempty"`     // EventsConfig.Worker
	Domain     string    `json:"domain,omitempty"`     // rls: the request's domain
	Descriptor string    `json:"descriptor,omitempty"` // rls: the matched descriptor path (config keys and values, never the request's values)
	Policy     string    `json:"policy"`
	Limit      string    `json:"limit,omitempty"` // the limit that refused (or would have)
	Tier       string    `json:"tier,omitempty"`
	// IdentityKind says what Identity digests: IdentityAPIKey,
	// IdentityIP or IdentityDescriptor.
	IdentityKind string `json:"identity_kind,omitempty"`
	// Identity is the counted identity's digest; Kafka records are keyed
	// by it. When empty, Run derives it from IdentityParts, else from
	// KeyID, else from ClientNet.
	Identity string `json:"identity,omitempty"`
	// IdentityParts, when set, are digested by Run into Identity (off the
	// request path); never written.
	IdentityParts []string     `json:"-"`
	KeyID         string       `json:"key_id,omitempty"`
	Tenant        string       `json:"tenant,omitempty"`
	IP            string       `json:"ip,omitempty"`        // the client's address
	ClientNet     netip.Prefix `json:"client_net,omitzero"` // the client's network as counted: the policy's ip_prefix
	Route         string       `json:"route,omitempty"`
	Decision      string       `json:"decision"`                // EventRefused or EventAdmitted
	Reason        Reason       `json:"reason"`                  // the stage that decided
	Status        int          `json:"status"`                  // the HTTP status (rls: 429, Envoy's answer to OVER_LIMIT)
	Remaining     int64        `json:"remaining"`               // of the limit named by Limit
	RetryAfter    float64      `json:"retry_after_s,omitempty"` // seconds
	// Shadow: a dry run (a shadow limit, edge --shadow, rls shadow_mode
	// or SHADOW_MODE); the request was admitted, Status is the answer it
	// would have had.
	Shadow bool `json:"shadow,omitempty"`
}

// EventSink receives encoded events, keyed by the identity digest.
// Produce must never block; it owns key and value once called (the
// caller never modifies them) and counts what it drops itself.
// pop/kafkasink.Sink is one.
type EventSink interface {
	Produce(key, value []byte)
}

// EventsConfig configures an event queue. Zero means default.
type EventsConfig struct {
	// Queue is the number of events buffered; default 4096. When full, new
	// events are dropped (and counted), never waited for.
	Queue int
	// FlushEvery bounds how long a written event may sit in the buffer of
	// a writer; default 1s. Unused with an EventSink.
	FlushEvery time.Duration
	// PoP and Worker are stamped on every event; default none.
	PoP, Worker string
	// Metrics counts dropped and written events
	// (poplimit_rejection_events_*); default none (pop.New sets its own).
	Metrics *Metrics
	// Logger reports the first sink failure (once); default
	// slog.Default().
	Logger *slog.Logger
}

// Events writes rejection events asynchronously, through a bounded queue,
// to a writer (JSON lines) or an EventSink (one JSON object per record):
// Emit never blocks and never encodes; Run encodes and writes. Safe for
// concurrent use.
type Events struct {
	q       chan Event
	out     io.Writer // the writer, or nil with an EventSink
	sink    EventSink
	w       *bufio.Writer
	log     *slog.Logger
	pop     string
	worker  string
	seq     uint64 // Run's goroutine only
	pending uint64 // encoded, not yet flushed (Run's goroutine only)
	failed  bool   // a sink failure was logged (Run's goroutine only)
	flush   time.Duration
	dropped atomic.Uint64
	written atomic.Uint64
	metrics *Metrics
}

// NewEvents returns a queue writing JSON lines to w once Run is going.
func NewEvents(w io.Writer, cfg EventsConfig) *Events {
	e := newEvents(cfg)
	e.out, e.w = w, bufio.NewWriter(w)
	return e
}

// NewEventsTo returns a queue producing to sink once Run is going.
func NewEventsTo(sink EventSink, cfg EventsConfig) *Events {
	e := newEvents(cfg)
	e.sink = sink
	return e
}

func newEvents(cfg EventsConfig) *Events {
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
	return &Events{q: make(chan Event, n), log: lg, flush: f, pop: cfg.PoP, worker: cfg.Worker, metrics: cfg.Metrics}
}

// Emit queues e, or drops it (reason queue_full) when the queue is full.
// A nil *Events drops silently.
func (e *Events) Emit(ev Event) {
	if e == nil {
		return
	}
	select {
	case e.q <- ev:
	default:
		e.dropped.Add(1)
		e.metrics.eventsDropped(dropQueueFull, 1)
	}
}

// Dropped is the number of events dropped so far by this queue: queue
// full, or lost to a writer error. An EventSink counts its own drops.
func (e *Events) Dropped() uint64 { return e.dropped.Load() }

// Written is the number of events written (flushed) to the writer, or
// handed to the EventSink, so far.
func (e *Events) Written() uint64 { return e.written.Load() }

// Run writes queued events until ctx ends, then drains what is queued and
// flushes. Call it once, in its own goroutine. Events lost to a writer
// error are counted as dropped (the first failure is logged); later
// events are tried again. The error returned is the final flush's.
func (e *Events) Run(ctx context.Context) error {
	if e.sink != nil {
		return e.runSink(ctx)
	}
	enc := json.NewEncoder(e.w)
	t := time.NewTicker(e.flush)
	defer t.Stop()
	write := func(ev Event) {
		if err := enc.Encode(e.stamp(ev)); err != nil {
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

// runSink is Run with an EventSink: each event is one record, keyed by
// its identity digest.
func (e *Events) runSink(ctx context.Context) error {
	produce := func(ev Event) {
		ev = e.stamp(ev)
		v, err := json.Marshal(&ev)
		if err != nil { // not for this schema's field types
			e.lost(1, err)
			return
		}
		e.sink.Produce([]byte(ev.Identity), v)
		e.written.Add(1)
	}
	for {
		select {
		case ev := <-e.q:
			produce(ev)
		case <-ctx.Done():
			for {
				select {
				case ev := <-e.q:
					produce(ev)
				default:
					return nil
				}
			}
		}
	}
}

// stamp sets the fields Run owns: version, sequence, PoP, worker and the
// identity digest.
func (e *Events) stamp(ev Event) Event {
	e.seq++
	ev.V, ev.Seq, ev.PoP, ev.Worker = EventSchemaVersion, e.seq, e.pop, e.worker
	if ev.Identity != "" {
		return ev
	}
	switch {
	case len(ev.IdentityParts) > 0:
		ev.Identity, ev.IdentityKind = policy.KeyID(strings.Join(ev.IdentityParts, "\x00")), IdentityDescriptor
	case ev.KeyID != "":
		ev.Identity, ev.IdentityKind = ev.KeyID, IdentityAPIKey
	case ev.ClientNet.IsValid():
		ev.Identity, ev.IdentityKind = policy.KeyID(ev.ClientNet.String()), IdentityIP
	}
	return ev
}

// flushNow flushes the buffer, counting its events as written or dropped.
func (e *Events) flushNow() error {
	if err := e.w.Flush(); err != nil {
		e.lost(e.pending, err)
		return err
	}
	e.written.Add(e.pending)
	e.metrics.eventsWritten(e.pending)
	e.pending = 0
	return nil
}

// lost counts n events as dropped after a writer error and resets the
// buffer (bufio errors are sticky) so that later events are tried again.
func (e *Events) lost(n uint64, err error) {
	e.dropped.Add(n)
	e.metrics.eventsDropped(dropWriteError, n)
	e.pending = 0
	if e.w != nil {
		e.w.Reset(e.out)
	}
	if !e.failed {
		e.failed = true
		e.log.Error("rejection events: sink write failed; dropping and counting lost events", "err", err)
	}
}

// event is the Event of decision d (a refusal, or a dry run's would-be
// refusal) for the client at ip with identity id.
func (l *Limiter) event(d *Decision, now time.Time, ip netip.Addr, id Identity) Event {
	ev := Event{
		Time: now, Policy: d.Policy, Tier: d.Tier, Reason: d.Reason, Status: d.Status, Decision: EventRefused,
		Limit: d.Binding.Limit.Name, IP: ip.String(), KeyID: id.KeyID, Tenant: id.Tenant, Route: id.Route,
		Remaining: max(d.Binding.Result.Remaining, 0), RetryAfter: d.RetryAfter().Seconds(),
	}
	if s := l.snap.Load(); s != nil && ip.IsValid() {
		ev.ClientNet = clientPrefix(s.file, ip)
	}
	if d.Allowed { // a dry run's would-be rejection
		ev.Shadow, ev.Decision, ev.Limit, ev.Status, ev.RetryAfter = true, EventAdmitted, d.Shadow, http.StatusTooManyRequests, 0
		ev.Remaining = max(d.ShadowBinding.Result.Remaining, 0)
	}
	return ev
}

// clientPrefix is the network per-IP counts key on (f.ClientNet), with
// its length.
func clientPrefix(f *policy.File, a netip.Addr) netip.Prefix {
	bits := f.IPv6Prefix
	if a.Is4() {
		bits = f.IPv4Prefix
		if bits == 0 {
			bits = 32
		}
	} else if bits == 0 {
		bits = 64
	}
	p, err := a.WithZone("").Prefix(min(bits, a.BitLen()))
	if err != nil {
		return netip.Prefix{}
	}
	return p
}
