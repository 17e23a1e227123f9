package embedded

// This file executes meta requests (mg ms md ma mn me) on the memory store,
// writing memcached 1.6.18's replies. The subset of flags supported:
//
//   - mg: b c f k O q s t v N (vivify: an empty item, reported W, then Z
//     to later mg) T (touch) u (accepted; LRU order is not modelled);
//   - ms: b c k O q F T C M (S E A P R);
//   - md: b k O q C;
//   - ma: b c k O q t v N J D T C M (I + D -);
//   - me: answers EN or ME with exp, la, cas, fetch (set by get, gat, mg),
//     cls (memcached's default slab classes) and size.
//
// The flags memcached accepts and ignores for a command (mg F, ma f, ...)
// are ignored too. The others that memcached knows (h l R for mg, I for ms
// and md) are answered "CLIENT_ERROR invalid flag" (mg, ms) or
// "CLIENT_ERROR invalid or duplicate flag" (md, ma), memcached's reply to an
// unknown flag. As in memcached, the k flag of an mg hit shows the key in
// base64 when the item was stored by an ms with b, whatever the mg's b.

import (
	"strconv"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// executeMeta is Execute for the meta commands. Requests that did not come
// through Parse are validated again. The reply to a quiet request always
// ends with the MN of the mn sent after it (see Request.Quiet).
func (b *Shard) executeMeta(dst []byte, r *protocol.Request, now time.Time) []byte {
	dst = b.executeMetaOne(dst, r, now)
	if r.Quiet && r.Cmd != protocol.CmdMn && r.Cmd != protocol.CmdMe {
		dst = append(dst, protocol.MNLine...)
	}
	return dst
}

// executeMetaOne is executeMeta without the MN of a quiet request.
func (b *Shard) executeMetaOne(dst []byte, r *protocol.Request, now time.Time) []byte {
	if r.Cmd == protocol.CmdMn {
		return append(dst, protocol.MNLine...)
	}
	key := r.Key()
	if len(key) == 0 || len(key) > protocol.MaxKeyLen {
		return append(append(dst, protocol.ErrBadFormat.Reply...), "\r\n"...)
	}
	var dec [protocol.MaxKeyLen]byte
	if r.Base64 {
		n := protocol.DecodeMetaKey(dec[:], key)
		if n == 0 && r.Cmd == protocol.CmdMe {
			return append(append(dst, protocol.ErrBadFormat.Reply...), "\r\n"...)
		}
		if n == 0 {
			return append(append(dst, protocol.ErrMetaDecodingKey.Reply...), "\r\n"...)
		}
		key = dec[:n]
	}
	if r.Cmd == protocol.CmdMe {
		return b.metaDebug(dst, key, r.Base64, now)
	}
	mf, err := protocol.PreparseMeta(r.Key(), r.MetaFlags, protocol.ErrBadFormat)
	if err == nil {
		err = memMetaUnsupported(r.Cmd, r.MetaFlags)
	}
	if err != nil {
		if r.Cmd == protocol.CmdMd || r.Cmd == protocol.CmdMa {
			err = protocol.ErrMetaFlagMd
		}
		return append(append(dst, err.Reply...), "\r\n"...)
	}
	start := len(dst)
	var shown bool
	switch r.Cmd {
	case protocol.CmdMg:
		dst, shown = b.metaGet(dst, key, r, &mf, now)
	case protocol.CmdMs:
		dst, shown = b.metaSet(dst, key, r, &mf, now)
	case protocol.CmdMd:
		dst, shown = b.metaDelete(dst, key, r, &mf, now)
	case protocol.CmdMa:
		dst, shown = b.metaArith(dst, key, r, &mf, now)
	default:
		return append(dst, "ERROR\r\n"...)
	}
	if r.Quiet && !shown {
		dst = dst[:start]
	}
	return dst
}

// memMetaUnsupported reports the flags the memory backend does not
// implement for cmd as an unknown flag.
func memMetaUnsupported(cmd protocol.Command, flags []byte) *protocol.ReplyError {
	for {
		var t []byte
		t, flags = protocol.NextMetaFlag(flags)
		if t == nil {
			return nil
		}
		switch {
		case cmd == protocol.CmdMg && (t[0] == 'h' || t[0] == 'l' || t[0] == 'R'),
			(cmd == protocol.CmdMs || cmd == protocol.CmdMd) && t[0] == 'I':
			return protocol.ErrMetaInvalidFlag
		}
	}
}

// appendMetaTTL appends t's value: -1 for no expiry, else seconds left.
func appendMetaTTL(dst []byte, exptime, sec int64) []byte {
	if exptime == 0 {
		return append(dst, "-1"...)
	}
	return strconv.AppendUint(dst, uint64(uint32(exptime-sec)), 10)
}

// metaGet executes mg; shown is false for a miss (q hides it).
func (b *Shard) metaGet(dst, key []byte, r *protocol.Request, mf *protocol.MetaArgs, now time.Time) ([]byte, bool) {
	s := b.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	e := s.lookup(string(key), sec)
	created := false
	if e == nil && mf.Vivify {
		ne := &memEntry{key: string(key), value: []byte{}, atime: sec, size: memItemSize(len(key), 0, 0)}
		if _, _, err := s.link(nil, ne, sec); err == nil {
			e, created = ne, true
		}
	}
	start := len(dst)
	if e == nil {
		dst = append(dst, "EN"...)
		for t, rest := protocol.NextMetaFlag(r.MetaFlags); t != nil; t, rest = protocol.NextMetaFlag(rest) {
			switch t[0] {
			case 'O':
				if len(t) > protocol.MetaMaxOpaque {
					return append(append(dst[:start], protocol.ErrMetaOpaqueTooLong.Reply...), "\r\n"...), true
				}
				dst = append(append(dst, ' '), t...)
			case 'k':
				dst = protocol.AppendMetaKey(append(dst, ' '), key, mf.Base64)
			}
		}
		return append(dst, "\r\n"...), false
	}
	if mf.Value {
		dst = strconv.AppendInt(append(dst, "VA "...), int64(len(e.value)), 10)
	} else {
		dst = append(dst, "HD"...)
	}
	won := false
	for t, rest := protocol.NextMetaFlag(r.MetaFlags); t != nil; t, rest = protocol.NextMetaFlag(rest) {
		switch t[0] {
		case 'T':
			e.exptime = s.realtime(int64(mf.TTL), sec)
		case 'N':
			if created {
				e.exptime = s.realtime(int64(mf.VivifyTTL), sec)
				won = true
			}
		case 's':
			dst = strconv.AppendInt(append(dst, " s"...), int64(len(e.value)), 10)
		case 't':
			dst = appendMetaTTL(append(dst, " t"...), e.exptime, sec)
		case 'c':
			dst = strconv.AppendUint(append(dst, " c"...), e.cas, 10)
		case 'f':
			dst = strconv.AppendUint(append(dst, " f"...), uint64(e.flags), 10)
		case 'O':
			if len(t) > protocol.MetaMaxOpaque {
				// memcached checks it here, after the flags before it
				// took effect, and neither bumps nor marks the item.
				return append(append(dst[:start], protocol.ErrMetaOpaqueTooLong.Reply...), "\r\n"...), true
			}
			dst = append(append(dst, ' '), t...)
		case 'k':
			dst = protocol.AppendMetaKey(append(dst, ' '), key, e.keyBinary)
		}
	}
	if e.tokenSent {
		dst = append(dst, " Z"...)
	}
	if won {
		dst = append(dst, " W"...)
		e.tokenSent = true
	}
	dst = append(dst, "\r\n"...)
	if mf.Value {
		dst = append(append(dst, e.value...), "\r\n"...)
	}
	if !mf.Has('u') {
		e.fetched = true
		s.bump(e, sec)
	}
	return dst, true
}

// metaSet executes ms; shown is false for HD (q hides it).
func (b *Shard) metaSet(dst, key []byte, r *protocol.Request, mf *protocol.MetaArgs, now time.Time) ([]byte, bool) {
	w := Write{
		Mode: ModeSet, Key: string(key), Value: append([]byte(nil), r.Data...),
		Flags: mf.ClientFlags, Exptime: int64(mf.TTL), CAS: mf.CAS,
	}
	switch mf.Mode {
	case 'E':
		w.Mode = ModeAdd
	case 'A':
		w.Mode = ModeAppend
	case 'P':
		w.Mode = ModePrepend
	case 'R':
		w.Mode = ModeReplace
	}
	if mf.HasCAS && (w.Mode == ModeSet || w.Mode == ModeReplace) {
		w.Mode = ModeCAS
	}
	res, cas, err := b.store.Store(w, now)
	if err != nil {
		return appendMemError(dst, err), true
	}
	// memcached's append and prepend build a new item that does not keep
	// the binary-key mark; other modes store the request's own item.
	if res == Stored && mf.Base64 && w.Mode != ModeAppend && w.Mode != ModePrepend {
		s := b.store
		s.mu.Lock()
		if e := s.items[string(key)]; e != nil && e.cas == cas {
			e.keyBinary = true
		}
		s.mu.Unlock()
	}
	dst = append(dst, [...]string{Stored: "HD", NotStored: "NS", Exists: "EX", NotFound: "NF"}[res]...)
	for t, rest := protocol.NextMetaFlag(r.MetaFlags); t != nil; t, rest = protocol.NextMetaFlag(rest) {
		switch t[0] {
		case 'O':
			dst = append(append(dst, ' '), t...)
		case 'k':
			dst = protocol.AppendMetaKey(append(dst, ' '), key, mf.Base64)
		case 'c':
			dst = strconv.AppendUint(append(dst, " c"...), cas, 10)
		}
	}
	return append(dst, "\r\n"...), res != Stored
}

// metaDelete executes md; shown is false for HD (q hides it).
func (b *Shard) metaDelete(dst, key []byte, r *protocol.Request, mf *protocol.MetaArgs, now time.Time) ([]byte, bool) {
	s := b.store
	s.mu.Lock()
	e := s.lookup(string(key), s.clock(now))
	status := "NF"
	switch {
	case e == nil:
	case mf.HasCAS && e.cas != mf.CAS:
		status = "EX"
	default:
		s.unlink(e)
		status = "HD"
	}
	s.mu.Unlock()
	dst = append(dst, status...)
	for t, rest := protocol.NextMetaFlag(r.MetaFlags); t != nil; t, rest = protocol.NextMetaFlag(rest) {
		switch t[0] {
		case 'O':
			dst = append(append(dst, ' '), t...)
		case 'k':
			dst = protocol.AppendMetaKey(append(dst, ' '), key, mf.Base64)
		}
	}
	return append(dst, "\r\n"...), status != "HD"
}

// metaArith executes ma; shown is false when an existing item was changed
// (q hides it), true when it was created (N), missing or an error.
func (b *Shard) metaArith(dst, key []byte, r *protocol.Request, mf *protocol.MetaArgs, now time.Time) ([]byte, bool) {
	s := b.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	delta := uint64(1)
	if mf.Has('D') {
		delta = mf.Delta
	}
	incr := mf.Mode != 'D' && mf.Mode != '-'
	e := s.lookup(string(key), sec)
	var value uint64
	created := false
	start := len(dst)
	switch {
	case e != nil && len(e.value) == 0: // memcached checks this before the CAS
		return appendMemError(dst, ErrNonNumeric), true
	case e != nil && mf.HasCAS && mf.CAS != 0 && e.cas != mf.CAS:
		e = nil
		dst = append(dst, "EX"...)
	case e != nil:
		n, ne, err := s.deltaLocked(e, incr, delta, sec)
		if err != nil {
			return appendMemError(dst, err), true
		}
		e, value = ne, n
	case mf.Vivify:
		digits := strconv.AppendUint(nil, mf.Initial, 10)
		ne := &memEntry{key: string(key), value: digits, atime: sec, size: memItemSize(len(key), 0, len(digits))}
		if _, _, err := s.link(nil, ne, sec); err != nil {
			return append(dst, "SERVER_ERROR Out of memory allocating new item\r\n"...), true
		}
		e, value, created = ne, mf.Initial, true
	default:
		dst = append(dst, "NF"...)
	}
	var num [20]byte
	digits := strconv.AppendUint(num[:0], value, 10)
	if e != nil {
		if mf.Value {
			dst = strconv.AppendInt(append(dst, "VA "...), int64(len(digits)), 10)
		} else {
			dst = append(dst, "HD"...)
		}
	}
	for t, rest := protocol.NextMetaFlag(r.MetaFlags); t != nil; t, rest = protocol.NextMetaFlag(rest) {
		switch {
		case t[0] == 'O' && len(t) > protocol.MetaMaxOpaque:
			// memcached checks it here, after the arithmetic.
			return append(append(dst[:start], protocol.ErrMetaOpaqueTooLong.Reply...), "\r\n"...), true
		case t[0] == 'O':
			dst = append(append(dst, ' '), t...)
		case t[0] == 'k':
			dst = protocol.AppendMetaKey(append(dst, ' '), key, mf.Base64)
		case e == nil:
		case t[0] == 'c':
			dst = strconv.AppendUint(append(dst, " c"...), e.cas, 10)
		case t[0] == 't':
			dst = appendMetaTTL(append(dst, " t"...), e.exptime, sec)
		case t[0] == 'T':
			e.exptime = s.realtime(int64(mf.TTL), sec)
		case t[0] == 'N' && created:
			e.exptime = s.realtime(int64(mf.VivifyTTL), sec)
		}
	}
	if e != nil && mf.Value {
		dst = append(append(dst, "\r\n"...), digits...)
	}
	return append(dst, "\r\n"...), e == nil || created
}

// metaDebug executes me.
func (b *Shard) metaDebug(dst, key []byte, binary bool, now time.Time) []byte {
	s := b.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.clock(now)
	e := s.lookup(string(key), sec)
	if e == nil {
		return append(dst, "EN\r\n"...)
	}
	dst = append(dst, "ME "...)
	if binary {
		dst = protocol.AppendBase64(dst, key)
	} else {
		dst = append(dst, key...)
	}
	exp := int64(-1)
	if e.exptime != 0 {
		exp = sec - e.exptime
	}
	dst = strconv.AppendInt(append(dst, " exp="...), exp, 10)
	dst = strconv.AppendInt(append(dst, " la="...), sec-e.atime, 10)
	dst = strconv.AppendUint(append(dst, " cas="...), e.cas, 10)
	if e.fetched {
		dst = append(dst, " fetch=yes cls="...)
	} else {
		dst = append(dst, " fetch=no cls="...)
	}
	dst = strconv.AppendInt(dst, int64(memSlabClass(e.size)), 10)
	dst = strconv.AppendInt(append(dst, " size="...), e.size, 10)
	return append(dst, "\r\n"...)
}

// memSlabClass is the slab class memcached 1.6 with default settings (-n
// 48, -f 1.25, 1 MiB pages) puts an item of size bytes in.
func memSlabClass(size int64) int {
	const chunkMax = 512 << 10
	sz := 96.0
	for cls := 1; ; cls++ {
		c := int64(sz)
		if c%8 != 0 {
			c += 8 - c%8
		}
		if size <= c {
			return cls
		}
		if float64(c) > chunkMax/1.25 {
			return cls + 1
		}
		sz = float64(c) * 1.25
	}
}
