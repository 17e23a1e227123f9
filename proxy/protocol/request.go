// Package protocol is the memcached text protocol as pure functions over
// byte buffers, with no I/O: the parsed Request and Parse (memcached 1.6's
// text commands and its replies to bad input, request.go, parse.go), the
// meta commands (mg ms md ma mn me, meta.go), the framing of a shard's
// replies (ReplyLen, reply.go), memcached's decimal scanner (number.go) and
// the read buffer's compaction (buffer.go). It imports only the standard
// library; proxy, the in-process shard (proxy/embedded) and the tests build
// on it.
package protocol

import "strconv"

// Command is a memcached text protocol command understood by the proxy.
type Command uint8

// The commands. CmdNone is the zero value and never returned by Parse.
const (
	CmdNone Command = iota
	CmdGet
	CmdGets
	CmdGat
	CmdGats
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdIncr
	CmdDecr
	CmdTouch
	CmdDelete
	CmdFlushAll
	CmdVerbosity
	CmdVersion
	CmdStats
	CmdMg // meta get
	CmdMs // meta set
	CmdMd // meta delete
	CmdMa // meta arithmetic
	CmdMn // meta no-op
	CmdMe // meta debug
	CmdQuit
)

var commandNames = [...]string{
	CmdNone: "none", CmdGet: "get", CmdGets: "gets", CmdGat: "gat", CmdGats: "gats",
	CmdSet: "set", CmdAdd: "add", CmdReplace: "replace", CmdAppend: "append",
	CmdPrepend: "prepend", CmdCas: "cas", CmdIncr: "incr", CmdDecr: "decr",
	CmdTouch: "touch", CmdDelete: "delete", CmdFlushAll: "flush_all",
	CmdVerbosity: "verbosity", CmdVersion: "version", CmdStats: "stats",
	CmdMg: "mg", CmdMs: "ms", CmdMd: "md", CmdMa: "ma", CmdMn: "mn", CmdMe: "me",
	CmdQuit: "quit",
}

// String returns the command's wire name ("get", "flush_all", ...).
func (c Command) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	return "Command(" + strconv.Itoa(int(c)) + ")"
}

// IsRetrieval reports whether c is get, gets, gat or gats: a command with
// any number of keys whose reply is VALUE blocks ended by END.
func (c Command) IsRetrieval() bool { return c >= CmdGet && c <= CmdGats }

// IsStorage reports whether c is set, add, replace, append, prepend or cas: a
// command followed by a data block.
func (c Command) IsStorage() bool { return c >= CmdSet && c <= CmdCas }

// IsMeta reports whether c is a meta protocol command (mg, ms, md, ma,
// mn, me); see meta.go.
func (c Command) IsMeta() bool { return c >= CmdMg && c <= CmdMe }

// IsBroadcast reports whether c is sent to every shard (flush_all,
// verbosity) with one reply to the client.
func (c Command) IsBroadcast() bool { return c == CmdFlushAll || c == CmdVerbosity }

// Request is one parsed memcached text protocol request.
//
// Byte slices (Keys, Data) point into the buffer given to Parse: they are
// valid only until that buffer is reused. A Request is not safe for
// concurrent mutation; backends must treat the Request they are given as
// read-only.
type Request struct {
	// Cmd is the command.
	Cmd Command
	// Keys holds the keys: one for storage, incr, decr, touch and delete;
	// zero or more for get, gets, gat, gats; none otherwise. Every key is
	// 1..250 bytes with no space or control byte.
	Keys [][]byte
	// Flags is the client flags of a storage command (memcached keeps the
	// low 32 bits of what the client sent).
	Flags uint32
	// Exptime is the expiry of a storage command, touch, gat and gats:
	// seconds from now when <= 30 days (60*60*24*30), a Unix time
	// otherwise; negative means already expired; 0 means never.
	Exptime int32
	// Cas is the compare-and-swap unique of a cas command.
	Cas uint64
	// Delta is the amount of incr and decr.
	Delta uint64
	// Delay is flush_all's optional delay in seconds (HasDelay tells
	// whether it was given), and Level is verbosity's level.
	Delay    int32
	HasDelay bool
	Level    uint32
	// Data is the value of a storage command, without its trailing "\r\n".
	Data []byte
	// Noreply is true when the client asked for no reply. Backends are
	// always sent requests with Noreply false; the proxy drops the reply.
	// Meta commands never set it (see Quiet).
	Noreply bool

	// The meta commands (mg ms md ma me; mn has none of these) keep their
	// command line as sent, since their flags are echoed in order:
	//
	// Line is the command line without its line end. It is forwarded to
	// memcached verbatim (with "\r\n"), so every flag reaches the shard.
	Line []byte
	// MetaFlags is the part of Line holding the flag tokens: after the key,
	// or for ms after the key and the data length. Possibly empty.
	MetaFlags []byte
	// Quiet is the q flag: the client wants no reply for nominal results
	// (mg EN, ms HD, md HD, ma HD/VA when not created). A quiet request is
	// sent to a backend followed by "mn\r\n", and the backend's reply is
	// what memcached writes for both (possibly nothing, then "MN\r\n"); the
	// proxy removes the MN. This keeps the suppression rules memcached's
	// own and replies matched in FIFO order on pipelined connections.
	Quiet bool
	// Base64 is the b flag: Keys[0] is base64 on the wire; memcached (and
	// the proxy, for hashing) uses its decoded bytes (see DecodeMetaKey).
	Base64 bool
}

// Key returns the first key, or nil when the request has none.
func (r *Request) Key() []byte {
	if len(r.Keys) == 0 {
		return nil
	}
	return r.Keys[0]
}

// Reset clears r for reuse, keeping the capacity of Keys.
func (r *Request) Reset() {
	keys := r.Keys[:0]
	*r = Request{Keys: keys}
}

// AppendWire appends r to dst in memcached's text protocol, as a backend
// memcached must receive it, and returns the extended buffer. Noreply is
// never written: the proxy always wants the backend's reply, to keep
// replies matched in order on a pipelined connection.
func (r *Request) AppendWire(dst []byte) []byte {
	if r.Cmd.IsMeta() {
		return r.appendMetaWire(dst)
	}
	dst = append(dst, r.Cmd.String()...)
	switch {
	case r.Cmd == CmdGat || r.Cmd == CmdGats:
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(r.Exptime), 10)
		fallthrough
	case r.Cmd.IsRetrieval():
		for _, k := range r.Keys {
			dst = append(dst, ' ')
			dst = append(dst, k...)
		}
	case r.Cmd.IsStorage():
		dst = append(dst, ' ')
		dst = append(dst, r.Key()...)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(r.Flags), 10)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(r.Exptime), 10)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(len(r.Data)), 10)
		if r.Cmd == CmdCas {
			dst = append(dst, ' ')
			dst = strconv.AppendUint(dst, r.Cas, 10)
		}
		dst = append(dst, "\r\n"...)
		dst = append(dst, r.Data...)
	case r.Cmd == CmdIncr || r.Cmd == CmdDecr:
		dst = append(dst, ' ')
		dst = append(dst, r.Key()...)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, r.Delta, 10)
	case r.Cmd == CmdTouch:
		dst = append(dst, ' ')
		dst = append(dst, r.Key()...)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(r.Exptime), 10)
	case r.Cmd == CmdDelete:
		dst = append(dst, ' ')
		dst = append(dst, r.Key()...)
	case r.Cmd == CmdFlushAll:
		if r.HasDelay {
			dst = append(dst, ' ')
			dst = strconv.AppendInt(dst, int64(r.Delay), 10)
		}
	case r.Cmd == CmdVerbosity:
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(r.Level), 10)
	}
	return append(dst, "\r\n"...)
}
