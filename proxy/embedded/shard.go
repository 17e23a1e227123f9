// Package embedded is an in-process memcached: Store holds one shard's
// items with memcached 1.6's semantics (store.go), and Shard executes
// parsed requests on it, text (shard.go) and meta (meta.go), writing the
// replies memcached 1.6.18 writes. mcproxy --embedded, the demo and tests
// without memcached serve it through proxy.NewLocalBackend. It imports
// proxy/protocol and the standard library, not proxy.
package embedded

import (
	"errors"
	"strconv"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// Version is what an in-process shard answers to "version".
const Version = "1.6.18-poplimit-memory"

// Shard is one in-process memcached shard: it executes parsed
// requests on its Store and writes the replies memcached 1.6 writes.
// proxy serves it as a Backend through proxy.NewLocalBackend (mcproxy's
// --embedded mode, the demo, tests without memcached). Time is a parameter
// of Execute. It is safe for concurrent use.
type Shard struct {
	store *Store
}

// New returns a shard over a new, empty Store configured
// by cfg.
func New(cfg Config) (*Shard, error) {
	s, err := NewStore(cfg)
	if err != nil {
		return nil, err
	}
	return &Shard{store: s}, nil
}

// Store returns the shard's store (tests and stats read it).
func (b *Shard) Store() *Store { return b.store }

// Execute runs r on the store at now and appends memcached's reply to dst,
// as if r.Noreply were false. Keys and data are copied when stored: r's
// slices may be reused once Execute returns. Commands a shard does not
// answer (quit, an unknown Cmd) get "ERROR".
func (b *Shard) Execute(dst []byte, r *protocol.Request, now time.Time) []byte {
	s := b.store
	switch r.Cmd {
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats:
		for _, k := range r.Keys {
			var it Item
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
		w := Write{
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
		return append(append(dst, "VERSION "+Version...), "\r\n"...)
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

var memModes = map[protocol.Command]Mode{
	protocol.CmdSet: ModeSet, protocol.CmdAdd: ModeAdd, protocol.CmdReplace: ModeReplace,
	protocol.CmdAppend: ModeAppend, protocol.CmdPrepend: ModePrepend, protocol.CmdCas: ModeCAS,
}

var memResults = map[Result]string{
	Stored: "STORED\r\n", NotStored: "NOT_STORED\r\n",
	Exists: "EXISTS\r\n", NotFound: "NOT_FOUND\r\n",
}

// appendValue appends one "VALUE <key> <flags> <bytes>[ <cas>]" block.
func appendValue(dst, key []byte, it Item, withCAS bool) []byte {
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
	case errors.Is(err, ErrTooLarge):
		return append(dst, "SERVER_ERROR object too large for cache\r\n"...)
	case errors.Is(err, ErrNonNumeric):
		return append(dst, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"...)
	case errors.Is(err, ErrOutOfMemory):
		return append(dst, "SERVER_ERROR out of memory storing object\r\n"...)
	}
	return append(dst, "SERVER_ERROR "+err.Error()+"\r\n"...)
}

func appendStat(dst []byte, name string, v uint64) []byte {
	dst = append(dst, "STAT "+name+" "...)
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, "\r\n"...)
}
