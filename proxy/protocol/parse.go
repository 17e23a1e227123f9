package protocol

import (
	"bytes"
	"errors"
	"math"
)

// Parse errors that are not protocol replies.
var (
	// ErrIncomplete: buf does not yet hold a whole request; read more.
	ErrIncomplete = errors.New("proxy: incomplete request")
	// ErrLineTooLong: no end of line within the line limit; memcached
	// closes the connection, and so does the proxy.
	ErrLineTooLong = errors.New("proxy: request line too long")
	// ErrBinaryProtocol: the request starts with the binary protocol's
	// magic byte (0x80), which the proxy does not speak; close.
	ErrBinaryProtocol = errors.New("proxy: binary protocol not supported")
	// ErrQuit: the client sent quit; close without a reply.
	ErrQuit = errors.New("proxy: quit")
)

// ReplyError is a request memcached answers with an error line while the
// connection stays usable. Reply is the full line without "\r\n", e.g.
// "ERROR", "CLIENT_ERROR bad data chunk",
// "SERVER_ERROR object too large for cache".
type ReplyError struct{ Reply string }

func (e *ReplyError) Error() string { return "proxy: " + e.Reply }

// The ReplyErrors Parse returns; compare with errors.Is or ==.
var (
	ErrUnknownCommand = &ReplyError{"ERROR"}
	ErrBadFormat      = &ReplyError{"CLIENT_ERROR bad command line format"}
	ErrBadDataChunk   = &ReplyError{"CLIENT_ERROR bad data chunk"}
	ErrBadDelta       = &ReplyError{"CLIENT_ERROR invalid numeric delta argument"}
	ErrBadExptime     = &ReplyError{"CLIENT_ERROR invalid exptime argument"}
	ErrBadDelete      = &ReplyError{"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"}
	ErrTooLarge       = &ReplyError{"SERVER_ERROR object too large for cache"}
)

// Limits bounds what Parse accepts. Zero means default.
type Limits struct {
	// MaxLine is the longest command line (without data) for every command
	// but get and gets; default 2048, memcached's.
	MaxLine int
	// MaxGetLine is the longest get/gets/gat/gats line; default 1 MiB
	// (memcached's is unbounded).
	MaxGetLine int
	// MaxItemSize is memcached's item size limit (-I): an item whose size
	// with memcached's header (see ItemSize) exceeds it is answered
	// "SERVER_ERROR object too large for cache" and its data swallowed,
	// exactly where memcached would. Default 1 MiB, memcached's default.
	MaxItemSize int
}

func (l Limits) maxLine() int {
	if l.MaxLine > 0 {
		return l.MaxLine
	}
	return 2048
}

func (l Limits) maxGetLine() int {
	if l.MaxGetLine > 0 {
		return l.MaxGetLine
	}
	return 1 << 20
}

func (l Limits) ItemLimit() int {
	if l.MaxItemSize > 0 {
		return l.MaxItemSize
	}
	return 1 << 20
}

// MaxKeyLen is memcached's longest key.
const MaxKeyLen = 250

const maxTokens = 8 // tokens kept for non-retrieval commands; more is ERROR anyway

// Parse parses the first request in buf into req (reset first; req.Keys'
// capacity is reused, so a steady state allocates nothing) and returns the
// number of bytes it spans. It is a pure function of buf and lim. Meta
// commands (mg ms md ma mn me) are parsed as memcached 1.6.18 does, see
// meta.go; they never set req.Noreply (see Request.Quiet).
//
// Results:
//   - err == nil: req is a valid request of n bytes.
//   - err == ErrIncomplete: buf holds no whole request yet. n is the total
//     length needed when known (a storage command waiting for its data), else 0.
//   - err is a *ReplyError: the client gets err.Reply (unless req.Noreply)
//     and the connection stays open; skip n bytes, which may exceed
//     len(buf) (a too large value's data block is swallowed unread). For
//     ErrTooLarge, req.Cmd and req.Keys are set: memcached also deletes the
//     key of a too large set or ms (req.Base64 tells how an ms key is
//     written).
//   - err is ErrLineTooLong, ErrBinaryProtocol or ErrQuit: close the
//     connection.
func Parse(buf []byte, lim Limits, req *Request) (n int, err error) {
	req.Reset()
	line, n, err := requestLine(buf, lim)
	if err != nil {
		return n, err
	}
	name, rest := nextToken(skipSpaces(line))
	req.Cmd = lookupCommand(name)
	switch {
	case req.Cmd == CmdNone:
		return n, ErrUnknownCommand
	case req.Cmd == CmdVersion:
		return n, nil
	case req.Cmd == CmdQuit:
		return n, ErrQuit
	case req.Cmd.IsMeta():
		return parseMeta(buf, line, lim, req, n)
	case req.Cmd.IsRetrieval():
		return parseRetrieval(rest, req, n)
	}
	return parseSimple(buf, rest, lim, req, n)
}

// requestLine finds the command line at the start of buf: the line without
// its end, and n, its length with the end. Errors: ErrIncomplete (no line
// end yet), ErrLineTooLong, ErrBinaryProtocol; n is then 0.
func requestLine(buf []byte, lim Limits) (line []byte, n int, err error) {
	if len(buf) == 0 {
		return nil, 0, ErrIncomplete
	}
	if buf[0] == 0x80 {
		return nil, 0, ErrBinaryProtocol
	}
	nl := bytes.IndexByte(buf, '\n')
	if nl < 0 {
		// A line at the limit may have its '\r' here and its '\n' still
		// to come: the '\r' is not part of the line.
		pending := bytes.TrimSuffix(buf, []byte{'\r'})
		if len(pending) > lim.maxLine() && (!isGetPrefix(pending) || len(pending) > lim.maxGetLine()) {
			return nil, 0, ErrLineTooLong
		}
		return nil, 0, ErrIncomplete
	}
	line = buf[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if len(line) > lim.maxLine() && (!isGetPrefix(line) || len(line) > lim.maxGetLine()) {
		return nil, 0, ErrLineTooLong
	}
	return line, nl + 1, nil
}

// lookupCommand returns the command named name, CmdNone for none.
func lookupCommand(name []byte) Command {
	switch string(name) {
	case "get":
		return CmdGet
	case "gets":
		return CmdGets
	case "gat":
		return CmdGat
	case "gats":
		return CmdGats
	case "set":
		return CmdSet
	case "add":
		return CmdAdd
	case "replace":
		return CmdReplace
	case "append":
		return CmdAppend
	case "prepend":
		return CmdPrepend
	case "cas":
		return CmdCas
	case "incr":
		return CmdIncr
	case "decr":
		return CmdDecr
	case "touch":
		return CmdTouch
	case "delete":
		return CmdDelete
	case "flush_all":
		return CmdFlushAll
	case "verbosity":
		return CmdVerbosity
	case "version":
		return CmdVersion
	case "stats":
		return CmdStats
	case "quit":
		return CmdQuit
	case "mg":
		return CmdMg
	case "ms":
		return CmdMs
	case "md":
		return CmdMd
	case "ma":
		return CmdMa
	case "mn":
		return CmdMn
	case "me":
		return CmdMe
	}
	return CmdNone
}

// parseSimple parses the commands with a handful of tokens after the
// command (rest): storage, incr, decr, touch, delete, flush_all,
// verbosity, stats. See Parse for the results.
func parseSimple(buf, rest []byte, lim Limits, req *Request, n int) (int, error) {
	var toks [maxTokens][]byte
	nt := 0
	for {
		var t []byte
		rest = skipSpaces(rest)
		if len(rest) == 0 {
			break
		}
		t, rest = nextToken(rest)
		if nt == maxTokens {
			return n, ErrUnknownCommand
		}
		toks[nt] = t
		nt++
	}
	args := toks[:nt]
	if nt > 0 && string(args[nt-1]) == "noreply" {
		req.Noreply = true
	}
	var err error
	switch req.Cmd {
	case CmdSet, CmdAdd, CmdReplace, CmdAppend, CmdPrepend, CmdCas:
		return parseStorage(buf, args, lim, req, n)
	case CmdIncr, CmdDecr, CmdTouch:
		err = parseKeyNumber(args, req)
	case CmdDelete:
		err = parseDelete(args, req)
	case CmdFlushAll:
		err = parseFlushAll(args, req)
	case CmdVerbosity:
		err = parseVerbosity(args, req)
	case CmdStats:
		// Only the bare "stats": the proxy's own counters. Sub-commands
		// (items, slabs, ...) describe one memcached and are not proxied.
		req.Noreply = false
		if nt != 0 {
			err = ErrUnknownCommand
		}
	}
	return n, err
}

// parseKeyNumber parses "<cmd> <key> <number> [noreply]": a delta for
// incr and decr, an exptime for touch.
func parseKeyNumber(args [][]byte, req *Request) error {
	if len(args) != 2 && len(args) != 3 {
		req.Noreply = false
		return ErrUnknownCommand
	}
	if !ValidKey(args[0]) {
		return ErrBadFormat
	}
	if req.Cmd == CmdTouch {
		e, ok := ParseInt32(args[1])
		if !ok {
			return ErrBadExptime
		}
		req.Exptime = e
	} else {
		d, ok := ParseUint(args[1])
		if !ok {
			return ErrBadDelta
		}
		req.Delta = d
	}
	req.Keys = append(req.Keys, args[0])
	return nil
}

// parseDelete parses "delete <key> [0] [noreply]".
func parseDelete(args [][]byte, req *Request) error {
	nt := len(args)
	if nt < 1 || nt > 3 {
		req.Noreply = false
		return ErrUnknownCommand
	}
	if nt > 1 {
		holdZero := string(args[1]) == "0"
		valid := (nt == 2 && (holdZero || req.Noreply)) || (nt == 3 && holdZero && req.Noreply)
		if !valid {
			return ErrBadDelete
		}
	}
	if !ValidKey(args[0]) {
		return ErrBadFormat
	}
	req.Keys = append(req.Keys, args[0])
	return nil
}

// parseFlushAll parses "flush_all [delay] [noreply]".
func parseFlushAll(args [][]byte, req *Request) error {
	nt := len(args)
	if nt > 2 {
		req.Noreply = false
		return ErrUnknownCommand
	}
	want := 0
	if req.Noreply {
		want = 1
	}
	if nt != want {
		d, ok := ParseInt32(args[0])
		if !ok {
			return ErrBadExptime
		}
		req.Delay, req.HasDelay = d, true
	}
	return nil
}

// parseVerbosity parses "verbosity <level> [noreply]".
func parseVerbosity(args [][]byte, req *Request) error {
	if len(args) != 1 && len(args) != 2 {
		req.Noreply = false
		return ErrUnknownCommand
	}
	l, ok := ParseUint(args[0])
	if !ok {
		return ErrBadFormat
	}
	req.Level = uint32(l)
	return nil
}

func parseRetrieval(rest []byte, req *Request, n int) (int, error) {
	rest = skipSpaces(rest)
	if len(rest) == 0 {
		return n, ErrUnknownCommand // "get" alone
	}
	if req.Cmd == CmdGat || req.Cmd == CmdGats {
		var t []byte
		t, rest = nextToken(rest)
		e, ok := ParseInt32(t)
		if !ok {
			return n, ErrBadExptime
		}
		req.Exptime = e
	}
	for {
		rest = skipSpaces(rest)
		if len(rest) == 0 {
			break
		}
		var k []byte
		k, rest = nextToken(rest)
		if !ValidKey(k) {
			req.Keys = req.Keys[:0]
			return n, ErrBadFormat
		}
		req.Keys = append(req.Keys, k)
	}
	return n, nil
}

func parseStorage(buf []byte, args [][]byte, lim Limits, req *Request, n int) (int, error) {
	want := 5
	if req.Cmd == CmdCas {
		want = 6
	}
	if len(args) != want-1 && len(args) != want {
		req.Noreply = false
		return n, ErrUnknownCommand
	}
	if !ValidKey(args[0]) {
		return n, ErrBadFormat
	}
	flags, ok1 := ParseUint(args[1])
	exp, ok2 := ParseInt32(args[2])
	vlen, ok3 := ParseInt32(args[3])
	if !ok1 || !ok2 || !ok3 {
		return n, ErrBadFormat
	}
	if req.Cmd == CmdCas {
		cas, ok := ParseUint(args[4])
		if !ok {
			return n, ErrBadFormat
		}
		req.Cas = cas
	}
	if vlen < 0 || vlen > math.MaxInt32-2 {
		return n, ErrBadFormat
	}
	req.Keys = append(req.Keys, args[0])
	req.Flags = uint32(flags)
	req.Exptime = exp
	total := n + int(vlen) + 2
	if ItemSize(len(args[0]), req.Flags, int(vlen)) > lim.ItemLimit() {
		return total, ErrTooLarge
	}
	if len(buf) < total {
		req.Keys = req.Keys[:0]
		return total, ErrIncomplete
	}
	if buf[total-2] != '\r' || buf[total-1] != '\n' {
		return total, ErrBadDataChunk
	}
	req.Data = buf[n : n+int(vlen)]
	return total, nil
}

// ItemSize is memcached 1.6's ITEM_ntotal on 64-bit with CAS enabled: a
// 48-byte header, 8 bytes of CAS, the key and its NUL, 4 bytes of flags when
// non-zero, and the value with its CRLF. memcached refuses an item larger
// than its item size limit (-I) as "too large".
func ItemSize(nkey int, flags uint32, vlen int) int {
	n := 48 + 8 + nkey + 1 + vlen + 2
	if flags != 0 {
		n += 4
	}
	return n
}

func isGetPrefix(b []byte) bool {
	b = skipSpaces(b)
	return bytes.HasPrefix(b, []byte("get ")) || bytes.HasPrefix(b, []byte("gets "))
}

func skipSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

// nextToken splits b (no leading space) at the first space.
func nextToken(b []byte) (tok, rest []byte) {
	i := bytes.IndexByte(b, ' ')
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

// ValidKey: 1..250 bytes, no control byte (memcached itself accepts control
// bytes other than space and newline; the proxy refuses them, as the
// project's key rules do).
func ValidKey(k []byte) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
