package proxy

// This file adapts the memory store to the Backend interface: it executes a
// parsed Request on a MemoryStore and writes the reply bytes memcached 1.6
// writes.

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// MemoryVersion is what an in-process shard answers to "version".
const MemoryVersion = "1.6.18-poplimit-memory"

// MemoryBackend is a Backend that executes requests on an in-process
// MemoryStore: one embedded shard for mcproxy's --embedded mode, the demo
// and tests without memcached. Requests run synchronously inside Do, so
// calls are applied in the order Do is called. It is safe for concurrent
// use.
//
// It has no wire and no queue, so it implements neither Stats nor
// OpenConns: in the Twemproxy stats its shards report request_bytes,
// response_bytes, server_eof, in_queue, in_queue_bytes, out_queue and
// out_queue_bytes as 0, and server_connections as configured.
type MemoryBackend struct {
	store  *MemoryStore
	now    func() time.Time
	closed atomic.Bool
}

var (
	_ Backend = (*MemoryBackend)(nil)
	_ Prober  = (*MemoryBackend)(nil)
)

// NewMemoryBackend returns a backend over a new, empty MemoryStore
// configured by cfg, with time.Now as its clock.
func NewMemoryBackend(cfg MemoryConfig) (*MemoryBackend, error) {
	return NewMemoryBackendClock(cfg, time.Now)
}

// NewMemoryBackendClock is NewMemoryBackend with the clock given (tests step
// it through fixed instants). now must be safe for concurrent use.
func NewMemoryBackendClock(cfg MemoryConfig, now func() time.Time) (*MemoryBackend, error) {
	if now == nil {
		return nil, errors.New("proxy: memory backend: nil clock")
	}
	s, err := NewMemoryStore(cfg)
	if err != nil {
		return nil, err
	}
	return &MemoryBackend{store: s, now: now}, nil
}

// Store returns the backend's store (tests and stats read it).
func (b *MemoryBackend) Store() *MemoryStore { return b.store }

// Do executes c.Req at once and finishes c: with the reply appended to
// c.Reply, or with ErrBackendClosed after Close.
func (b *MemoryBackend) Do(c *Call) {
	if b.closed.Load() {
		c.Finish(ErrBackendClosed)
		return
	}
	c.Reply = b.Execute(c.Reply, c.Req, b.now())
	c.Finish(nil)
}

// Close makes later calls fail with ErrBackendClosed. The store's data stays
// readable through Store.
func (b *MemoryBackend) Close() error {
	b.closed.Store(true)
	return nil
}

// Probe reports the backend healthy unless it is closed.
func (b *MemoryBackend) Probe(ctx context.Context) error {
	if b.closed.Load() {
		return ErrBackendClosed
	}
	return ctx.Err()
}

// Execute runs r on the store at now and appends memcached's reply to dst,
// as if r.Noreply were false. Keys and data are copied when stored: r's
// slices may be reused once Execute returns. Commands a shard does not
// answer (quit, an unknown Cmd) get "ERROR".
func (b *MemoryBackend) Execute(dst []byte, r *protocol.Request, now time.Time) []byte {
	s := b.store
	switch r.Cmd {
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats:
		for _, k := range r.Keys {
			var it MemoryItem
			var ok bool
			if r.Cmd == protocol.CmdGat || r.Cmd == protocol.CmdGats {
				it, ok = s.Touch(string(k), int64(r.Exptime), now)
			} else {
				it, ok = s.Get(string(k), now)
			}
			if ok {
				dst = appendValue(dst, k, it, r.Cmd == protocol.CmdGets || r.Cmd == protocol.CmdGats)
			}
		}
		return append(dst, "END\r\n"...)
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		w := MemoryWrite{
			Mode:    memModes[r.Cmd],
			Key:     string(r.Key()),
			Value:   append([]byte(nil), r.Data...),
			Flags:   r.Flags,
			Exptime: int64(r.Exptime),
			CAS:     r.Cas,
		}
		res, _, err := s.Store(w, now)
		if err != nil {
			return appendMemError(dst, err)
		}
		return append(dst, memResults[res]...)
	case protocol.CmdIncr, protocol.CmdDecr:
		n, found, err := s.Delta(string(r.Key()), r.Cmd == protocol.CmdIncr, r.Delta, now)
		switch {
		case err != nil:
			return appendMemError(dst, err)
		case !found:
			return append(dst, "NOT_FOUND\r\n"...)
		}
		return append(strconv.AppendUint(dst, n, 10), "\r\n"...)
	case protocol.CmdTouch:
		if _, ok := s.Touch(string(r.Key()), int64(r.Exptime), now); ok {
			return append(dst, "TOUCHED\r\n"...)
		}
		return append(dst, "NOT_FOUND\r\n"...)
	case protocol.CmdDelete:
		if s.Delete(string(r.Key()), now) {
			return append(dst, "DELETED\r\n"...)
		}
		return append(dst, "NOT_FOUND\r\n"...)
	case protocol.CmdFlushAll:
		s.FlushAll(int64(r.Delay), now)
		return append(dst, "OK\r\n"...)
	case protocol.CmdVerbosity:
		return append(dst, "OK\r\n"...)
	case protocol.CmdVersion:
		return append(append(dst, "VERSION "+MemoryVersion...), "\r\n"...)
	case protocol.CmdMg, protocol.CmdMs, protocol.CmdMd, protocol.CmdMa, protocol.CmdMn, protocol.CmdMe:
		return b.executeMeta(dst, r, now)
	case protocol.CmdStats:
		dst = appendStat(dst, "curr_items", uint64(s.Len()))
		dst = appendStat(dst, "bytes", uint64(s.Bytes()))
		dst = appendStat(dst, "limit_maxbytes", uint64(s.maxBytes))
		dst = appendStat(dst, "evictions", s.Evictions())
		return append(dst, "END\r\n"...)
	}
	return append(dst, "ERROR\r\n"...)
}

var memModes = map[protocol.Command]MemoryMode{
	protocol.CmdSet: MemSet, protocol.CmdAdd: MemAdd, protocol.CmdReplace: MemReplace,
	protocol.CmdAppend: MemAppend, protocol.CmdPrepend: MemPrepend, protocol.CmdCas: MemCAS,
}

var memResults = map[MemoryResult]string{
	MemStored: "STORED\r\n", MemNotStored: "NOT_STORED\r\n",
	MemExists: "EXISTS\r\n", MemNotFound: "NOT_FOUND\r\n",
}

// appendValue appends one "VALUE <key> <flags> <bytes>[ <cas>]" block.
func appendValue(dst, key []byte, it MemoryItem, withCAS bool) []byte {
	dst = append(dst, "VALUE "...)
	dst = append(dst, key...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(it.Flags), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(it.Value)), 10)
	if withCAS {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, it.CAS, 10)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, it.Value...)
	return append(dst, "\r\n"...)
}

// appendMemError appends memcached's reply for a store error.
func appendMemError(dst []byte, err error) []byte {
	switch {
	case errors.Is(err, ErrMemoryTooLarge):
		return append(dst, "SERVER_ERROR object too large for cache\r\n"...)
	case errors.Is(err, ErrMemoryNonNumeric):
		return append(dst, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"...)
	case errors.Is(err, ErrMemoryOutOfMemory):
		return append(dst, "SERVER_ERROR out of memory storing object\r\n"...)
	}
	return append(dst, "SERVER_ERROR "+err.Error()+"\r\n"...)
}

func appendStat(dst []byte, name string, v uint64) []byte {
	dst = append(dst, "STAT "+name+" "...)
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, "\r\n"...)
}
