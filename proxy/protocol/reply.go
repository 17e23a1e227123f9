package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

func FirstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	}
	return b[:min(len(b), 80)]
}

var (
	EndLine     = []byte("END\r\n")
	ValuePrefix = []byte("VALUE ")
)

// ReplyLen returns the length of the complete memcached reply to req at
// the start of buf. When buf holds only part of it, err is ErrIncomplete
// and n is the total length needed when known (a value's length is read),
// else 0. A reply that cannot be one is ErrBadReply. It is a pure
// function of buf and req.Cmd.
func ReplyLen(buf []byte, req *Request) (n int, err error) {
	if req.Cmd.IsMeta() {
		return metaReplyLen(buf, req)
	}
	if !req.Cmd.IsRetrieval() {
		nl := bytes.IndexByte(buf, '\n')
		if nl < 0 {
			if len(buf) > maxReplyLine {
				return 0, fmt.Errorf("%w: line too long", ErrBadReply)
			}
			return 0, ErrIncomplete
		}
		return nl + 1, nil
	}
	off := 0
	for {
		nl := bytes.IndexByte(buf[off:], '\n')
		if nl < 0 {
			if len(buf)-off > maxReplyLine {
				return 0, fmt.Errorf("%w: line too long", ErrBadReply)
			}
			return 0, ErrIncomplete
		}
		line := buf[off : off+nl+1]
		if !bytes.HasPrefix(line, ValuePrefix) {
			return off + len(line), nil // END, or an error line
		}
		v, ok := ValueLen(line)
		if !ok {
			return 0, fmt.Errorf("%w: %q", ErrBadReply, line)
		}
		end := off + len(line) + v + 2
		if end > len(buf) {
			return end, ErrIncomplete
		}
		if buf[end-2] != '\r' || buf[end-1] != '\n' {
			return 0, fmt.Errorf("%w: value not ended by CRLF", ErrBadReply)
		}
		off = end
	}
}

// ValueLen returns the <bytes> field of "VALUE <key> <flags> <bytes> [<cas>]\r\n".
func ValueLen(line []byte) (int, bool) {
	f := line[len(ValuePrefix):]
	for i := 0; i < 2; i++ {
		j := bytes.IndexByte(f, ' ')
		if j < 0 {
			return 0, false
		}
		f = f[j+1:]
	}
	end := 0
	for end < len(f) && f[end] >= '0' && f[end] <= '9' {
		end++
	}
	if end == 0 || end > 10 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[:end]))
	if err != nil || n > 1<<30 {
		return 0, false
	}
	return n, true
}

var (
	MNLine   = []byte("MN\r\n")
	vaPrefix = []byte("VA ")
)

// metaReplyLen is ReplyLen for a meta request: one line, with its data
// block when it is "VA <n> ...", or, for a quiet request, whatever comes
// before the "MN" line of the mn sent after it, and that line.
func metaReplyLen(buf []byte, req *Request) (n int, err error) {
	off := 0
	for {
		nl := bytes.IndexByte(buf[off:], '\n')
		if nl < 0 {
			if len(buf)-off > maxReplyLine {
				return 0, fmt.Errorf("%w: line too long", ErrBadReply)
			}
			return 0, ErrIncomplete
		}
		line := buf[off : off+nl+1]
		off += len(line)
		if bytes.HasPrefix(line, vaPrefix) {
			f := line[len(vaPrefix):]
			end := 0
			for end < len(f) && end < 11 && f[end] >= '0' && f[end] <= '9' {
				end++
			}
			v, ok := ParseUint(f[:end])
			if !ok || v > 1<<30 {
				return 0, fmt.Errorf("%w: %q", ErrBadReply, line)
			}
			off += int(v) + 2
			if off > len(buf) {
				return off, ErrIncomplete
			}
			if buf[off-2] != '\r' || buf[off-1] != '\n' {
				return 0, fmt.Errorf("%w: value not ended by CRLF", ErrBadReply)
			}
		}
		if !req.Quiet || bytes.Equal(line, MNLine) {
			return off, nil
		}
	}
}

// maxReplyLine bounds a reply line: a longer one is a bad reply.
const maxReplyLine = 64 << 10

// ErrBadReply: the bytes are not a memcached reply (a shard sent garbage).
var ErrBadReply = errors.New("protocol: bad reply from shard")
