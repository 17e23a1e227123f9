package protocol

import (
	"bytes"
	"errors"
	"testing"
)

// parseSentinels are every error Parse may return: the connection-level
// errors and the *ReplyError values (compared by identity: Parse never
// makes a new one).
var parseSentinels = []error{ErrIncomplete, ErrLineTooLong, ErrBinaryProtocol, ErrQuit,
	ErrUnknownCommand, ErrBadFormat, ErrBadDataChunk, ErrBadDelta, ErrBadExptime, ErrBadDelete, ErrTooLarge,
	ErrMetaDuplicateFlag, ErrMetaInvalidFlag, ErrMetaFlagMd, ErrMetaDecodingKey, ErrMetaBadToken, ErrMetaModeLength,
	ErrMetaBadInitial, ErrMetaBadDelta, ErrMetaTooManyFlagsMg, ErrMetaTooManyFlags, ErrMetaOpaqueTooLong,
	ErrMetaMsMode, ErrMetaMaMode}

func isParseSentinel(err error) bool {
	for _, s := range parseSentinels {
		if err == s {
			return true
		}
	}
	return false
}

// FuzzParsePrefix: what the server loop relies on when a request arrives
// in pieces. Parse returns only the package's sentinel errors; a request
// (or a reply error) of n bytes parses the same from exactly its n bytes
// and from more; every strict prefix of it is ErrIncomplete (or the same
// reply error, once the line of a command whose data is skipped is
// complete), never a shorter request, and an incomplete storage command that names the
// length it needs names the same length.
func FuzzParsePrefix(f *testing.F) {
	for _, s := range fuzzSeedsFromTranscripts(f) {
		f.Add(s, []byte("get a\r\n"))
	}
	f.Add([]byte("set k 0 0 5\r\nab"), []byte("c\r\n"))
	f.Add([]byte("ms k 2 T0\r\nhi\r\n"), []byte("mn\r\n"))
	f.Add([]byte("incr k 1 noreply\r\n"), []byte{})
	lim := Limits{MaxLine: 512, MaxGetLine: 4096, MaxItemSize: 1024}
	f.Fuzz(func(t *testing.T, buf, more []byte) {
		if len(buf) > 4096 {
			return
		}
		var r Request
		n, err := Parse(buf, lim, &r)
		if err != nil && !isParseSentinel(err) {
			t.Fatalf("Parse(%q): error %v is not a sentinel", buf, err)
		}
		var re *ReplyError
		complete := err == nil
		if !complete {
			if rerr, ok := err.(*ReplyError); ok {
				re, complete = rerr, n <= len(buf)
			}
		}
		if !complete {
			return
		}
		if n <= 0 || n > len(buf) {
			t.Fatalf("Parse(%q) = %d, %v", buf, n, err)
		}
		wire := r.AppendWire(nil)
		cmd, key := r.Cmd, append([]byte(nil), r.Key()...)
		for _, in := range [][]byte{buf[:n:n], append(buf[:n:n], more...)} {
			var r2 Request
			n2, err2 := Parse(in, lim, &r2)
			if n2 != n || err2 != err || r2.Cmd != cmd || !bytes.Equal(r2.Key(), key) || (err == nil && !bytes.Equal(r2.AppendWire(nil), wire)) {
				t.Fatalf("%q: %d %v %v %q; from %q: %d %v %v %q", buf, n, err, cmd, key, in, n2, err2, r2.Cmd, r2.Key())
			}
		}
		for k := 0; k < n; k++ {
			if n > 300 && k > 32 && k < n-32 && buf[k-1] != '\n' && buf[k] != '\r' {
				continue // long requests: the ends and the line boundaries
			}
			var r2 Request
			n2, err2 := Parse(buf[:k:k], lim, &r2)
			// A reply error whose data block is swallowed unread comes as
			// soon as its line is complete, with the same length.
			if err2 != ErrIncomplete && !(re != nil && err2 == err && n2 == n) {
				t.Fatalf("prefix %q of %q (%d bytes, %v): %d %v", buf[:k], buf, n, re, n2, err2)
			}
			if n2 != 0 && n2 != n {
				t.Fatalf("prefix %q of %q (%d bytes) needs %d", buf[:k], buf, n, n2)
			}
		}
	})
}

// FuzzMetaReplyLen: the pool's framing of meta replies (metaReplyLen via
// ReplyLen) never panics, never claims more bytes than it was given, ends
// a complete reply at a newline, frames that prefix alone the same, and
// calls every strict prefix incomplete, for loud and quiet requests.
func FuzzMetaReplyLen(f *testing.F) {
	for _, s := range []string{"VA 2 f0\r\nhi\r\n", "HD\r\n", "EN\r\nMN\r\n", "NF\r\n", "VA 5 t-1\r\nab", "MN\r\n",
		"ME k exp=-1 la=1 cas=2 fetch=no cls=1 size=63\r\n", "CLIENT_ERROR bad\r\n", "VA -1\r\n", "HD O123 k\r\nMN\r\n"} {
		for _, req := range []string{"mg k v f", "mg k v q", "ms k 2 q", "md k", "ma k v", "mn", "me k"} {
			f.Add([]byte(s), []byte(req+"\r\n"))
		}
	}
	lim := Limits{MaxLine: 512, MaxItemSize: 1024}
	f.Fuzz(func(t *testing.T, buf, reqLine []byte) {
		var req Request
		if _, err := Parse(reqLine, lim, &req); err != nil || !req.Cmd.IsMeta() {
			return
		}
		n, err := ReplyLen(buf, &req)
		if err != nil {
			return
		}
		if n <= 0 || n > len(buf) || buf[n-1] != '\n' {
			t.Fatalf("replyLen(%q) for %q = %d", buf, reqLine, n)
		}
		if m, err := ReplyLen(buf[:n:n], &req); err != nil || m != n {
			t.Fatalf("prefix %q: %d %v, want %d", buf[:n], m, err, n)
		}
		for i := 0; i < n; i++ {
			if m, err := ReplyLen(buf[:i:i], &req); err == nil {
				t.Fatalf("strict prefix %q complete (%d) though %q is %d", buf[:i], m, buf, n)
			}
		}
	})
}

// TestParseMetaControlKey pins what FuzzParse found (input
// "ms \x12 1 \na\r\n"): memcached 1.6.18 takes a meta key with a control
// byte (it answers HD), the proxy refuses it as it refuses control bytes in
// text-command keys, so every key it forwards is legal.
func TestParseMetaControlKey(t *testing.T) {
	for _, in := range []string{"ms \x12 1 \na\r\n", "mg a\x01b v\r\n", "md \x7f\r\n"} {
		var r Request
		if _, err := Parse([]byte(in), Limits{MaxLine: 512, MaxItemSize: 1024}, &r); !errors.Is(err, ErrBadFormat) {
			t.Errorf("%q: err %v, want ErrBadFormat", in, err)
		}
	}
}
