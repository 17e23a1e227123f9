package embedded

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// FuzzMemoryExecute: the text commands the parser accepts, run on the
// memory backend, never panic, keep the store's bookkeeping intact, and
// answer exactly one reply as the pool's reader frames it (protocol.ReplyLen), so
// an embedded shard can stand in for memcached; a retrieval answers only
// keys it was asked for.
func FuzzMemoryExecute(f *testing.F) {
	f.Add([]byte("set a 1 0 2\r\n10\r\nincr a 5\r\nget a b\r\nappend a 0 0 1\r\nx\r\nincr a 1\r\ngets a\r\ncas a 0 0 1 1\r\ny\r\n"))
	f.Add([]byte("add b 0 -1 1\r\nz\r\ngat 100 b\r\ntouch b 0\r\ndelete b\r\nflush_all 2\r\nversion\r\nverbosity 1\r\n"))
	f.Fuzz(func(t *testing.T, buf []byte) {
		b, err := New(Config{MaxBytes: 4096, ItemSizeMax: 512})
		if err != nil {
			t.Fatal(err)
		}
		lim := protocol.Limits{MaxLine: 512, MaxGetLine: 4096, MaxItemSize: 512}
		for off, step := 0, 0; off < len(buf) && step < 64; step++ {
			var r protocol.Request
			n, err := protocol.Parse(buf[off:], lim, &r)
			if n <= 0 || (err != nil && !errorsAsReply(err)) {
				return
			}
			off += n
			if err != nil || r.Cmd.IsMeta() || r.Cmd == protocol.CmdStats { // meta: FuzzMemoryMeta; stats: answered by the proxy
				continue
			}
			reply := b.Execute(nil, &r, memT0.Add(time.Duration(step)*time.Second))
			if m, rerr := protocol.ReplyLen(reply, &r); rerr != nil || m != len(reply) {
				t.Fatalf("%q: reply %q framed as %d bytes (%v)", r.AppendWire(nil), reply, m, rerr)
			}
			if r.Cmd.IsRetrieval() {
				for rest := reply; bytes.HasPrefix(rest, protocol.ValuePrefix); {
					line := rest[:bytes.IndexByte(rest, '\n')+1]
					k := bytes.Fields(line)[1]
					if !slices.ContainsFunc(r.Keys, func(rk []byte) bool { return bytes.Equal(rk, k) }) {
						t.Fatalf("%q answered key %q", r.AppendWire(nil), k)
					}
					v, _ := protocol.ValueLen(line)
					rest = rest[len(line)+v+2:]
				}
			}
			checkMemInvariants(t, b.Store())
		}
	})
}

func errorsAsReply(err error) bool { _, ok := err.(*protocol.ReplyError); return ok }
