package embedded

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// TestMemoryBackendMeta steps the memory backend through meta requests at
// fixed instants; the expected replies are memcached 1.6.18's (probed with
// the same requests).
func TestMemoryBackendMeta(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at   int64 // seconds after memT0
		in   string
		want string
	}{
		{0, "mg w1 N30 v t\r\n", "VA 0 t30 W\r\n\r\n"},
		{0, "mg w1 v\r\n", "VA 0 Z\r\n\r\n"},
		{0, "mg w1\r\n", "HD Z\r\n"},
		{0, "ms w1 1\r\nx\r\n", "HD\r\n"},
		{0, "mg w1\r\n", "HD\r\n"},
		{0, "me w1\r\n", "ME w1 exp=-1 la=0 cas=2 fetch=yes cls=1 size=62\r\n"},
		{0, "me nope\r\n", "EN\r\n"},
		{0, "mg w2 N0 c s f\r\n", "HD c3 s0 f0 W\r\n"},
		{0, "ma w3 N0 J7 q v\r\n", "VA 1\r\n7\r\nMN\r\n"},
		{0, "ma w3 q v\r\n", "MN\r\n"},
		{0, "ma w3 v\r\n", "VA 1\r\n9\r\n"},
		{0, "ms big 1 F4294967297\r\nx\r\n", "HD\r\n"},
		{0, "mg big f v\r\n", "VA 1 f1\r\nx\r\n"},
		{0, "ma w3 T0 t v\r\n", "VA 2 t-1\r\n10\r\n"},
		{0, "ma w3 T100 t v\r\n", "VA 2 t100\r\n11\r\n"}, // flags act in order: T, then t
		{10, "mg w3 t v\r\n", "VA 2 t90\r\n11\r\n"},
		{10, "ms t 2 T5 q\r\nhi\r\n", "MN\r\n"},
		{10, "me t\r\n", "ME t exp=-5 la=0 cas=10 fetch=no cls=1 size=62\r\n"},
		{16, "mg t q\r\n", "MN\r\n"},
		{16, "md t q\r\n", "NF\r\nMN\r\n"},
		{16, "mg t v q k O1\r\n", "MN\r\n"},
		{16, "mg t v k O1 b\r\n", "CLIENT_ERROR error decoding key\r\n"},
		{16, "ms Zm9v 2 b k\r\nhi\r\n", "HD kZm9v b\r\n"},
		{16, "mg foo k v\r\n", "VA 2 kZm9v b\r\nhi\r\n"},
		{16, "me Zm9v b\r\n", "ME Zm9v exp=-1 la=0 cas=11 fetch=yes cls=1 size=64\r\n"},
		{16, "mg foo h\r\n", "CLIENT_ERROR invalid flag\r\n"},
		{16, "md foo I\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"},
		{16, "ms foo 1 I\r\nx\r\n", "CLIENT_ERROR invalid flag\r\n"},
		{16, "ma foo\r\n", "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
		{16, "ma foo q\r\n", "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\n"},
		{16, "md foo C1 q\r\n", "EX\r\nMN\r\n"},
		{16, "md foo C11 q\r\n", "MN\r\n"},
		{16, "mn\r\n", "MN\r\n"},
		{16, "mg foo h q\r\n", "CLIENT_ERROR invalid flag\r\nMN\r\n"}, // unsupported here, still framed
	}
	for _, st := range steps {
		var r protocol.Request
		if _, err := protocol.Parse([]byte(st.in), protocol.Limits{}, &r); err != nil {
			if re, ok := err.(*protocol.ReplyError); !ok || re.Reply+"\r\n" != st.want {
				t.Errorf("at %d %q: parse %v", st.at, st.in, err)
			}
			continue
		}
		got := string(b.Execute(nil, &r, memT0.Add(time.Duration(st.at)*time.Second)))
		if got != st.want {
			t.Errorf("at %d %q: got %q, want %q", st.at, st.in, got, st.want)
		}
	}
}

func TestMemSlabClass(t *testing.T) {
	for _, tt := range []struct {
		size int64
		cls  int
	}{{62, 1}, {96, 1}, {97, 2}, {120, 2}, {121, 3}, {1000, 12}, {600000, 40}} {
		if got := memSlabClass(tt.size); got != tt.cls {
			t.Errorf("size %d: class %d, want %d", tt.size, got, tt.cls)
		}
	}
}

// FuzzMemoryMeta: whatever meta requests the parser accepts, the memory
// backend never panics, and each reply is exactly one reply as the pool's
// reader frames it (metaReplyLen), so an embedded shard and a memcached
// shard are interchangeable behind the proxy.
func FuzzMemoryMeta(f *testing.F) {
	for _, s := range []string{
		"mg foo v k O1 q\r\n", "ms k 2 T0 F5 q c k\r\nhi\r\nmg k v c f s t k\r\n", "ma k N0 J13 v q\r\nma k v t c\r\n",
		"md Zm9v b q k\r\n", "me k\r\nmn\r\n", "mg k N30 v\r\nmg k v\r\n", "ms k 1 MA C0\r\nx\r\nma k MD D3 v\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		b, err := New(Config{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		lim := protocol.Limits{MaxLine: 512, MaxItemSize: 1024}
		for off, steps := 0, 0; off < len(buf) && steps < 50; steps++ {
			var r protocol.Request
			n, err := protocol.Parse(buf[off:], lim, &r)
			if err != nil && !errors.As(err, new(*protocol.ReplyError)) {
				return
			}
			off += n
			if err != nil || !r.Cmd.IsMeta() {
				continue
			}
			reply := b.Execute(nil, &r, memT0.Add(time.Duration(steps)*time.Second))
			m, rerr := protocol.ReplyLen(reply, &r)
			if rerr != nil || m != len(reply) {
				t.Fatalf("%q: reply %q framed as %d bytes (%v)", r.AppendWire(nil), reply, m, rerr)
			}
			if r.Quiet && !bytes.HasSuffix(reply, protocol.MNLine) {
				t.Fatalf("quiet %q: reply %q without MN", r.Line, reply)
			}
		}
	})
}
