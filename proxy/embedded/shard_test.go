package embedded

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

func keys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

// TestMemoryBackendReplies runs requests in order on one backend and checks
// each reply byte for byte (the replies memcached 1.6.18 gives to the same
// requests; the differential test checks the same against a live one).
func TestMemoryBackendReplies(t *testing.T) {
	steps := []struct {
		at   int64 // seconds after memT0
		req  protocol.Request
		want string
	}{
		{0, protocol.Request{Cmd: protocol.CmdGet, Keys: keys("a")}, "END\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdSet, Keys: keys("a"), Flags: 5, Data: []byte("100")}, "STORED\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdGets, Keys: keys("a", "nope", "a")}, "VALUE a 5 3 1\r\n100\r\nVALUE a 5 3 1\r\n100\r\nEND\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdAdd, Keys: keys("a"), Data: []byte("x")}, "NOT_STORED\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdReplace, Keys: keys("b"), Data: []byte("x")}, "NOT_STORED\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdCas, Keys: keys("b"), Data: []byte("x"), Cas: 1}, "NOT_FOUND\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdCas, Keys: keys("a"), Data: []byte("x"), Cas: 7}, "EXISTS\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdDecr, Keys: keys("a"), Delta: 1}, "99\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdGet, Keys: keys("a")}, "VALUE a 5 3\r\n99 \r\nEND\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdIncr, Keys: keys("a"), Delta: 18446744073709551615}, "98\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdIncr, Keys: keys("nope"), Delta: 1}, "NOT_FOUND\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdPrepend, Keys: keys("a"), Flags: 9, Data: []byte("x")}, "STORED\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdIncr, Keys: keys("a"), Delta: 1}, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
		{0, protocol.Request{Cmd: protocol.CmdGats, Exptime: 10, Keys: keys("a")}, "VALUE a 5 4 4\r\nx98 \r\nEND\r\n"},
		{9, protocol.Request{Cmd: protocol.CmdGat, Exptime: 0, Keys: keys("a", "b")}, "VALUE a 5 4\r\nx98 \r\nEND\r\n"},
		{100, protocol.Request{Cmd: protocol.CmdTouch, Keys: keys("a"), Exptime: 5}, "TOUCHED\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdTouch, Keys: keys("a"), Exptime: 5}, "NOT_FOUND\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdSet, Keys: keys("big"), Data: make([]byte, 1<<20)}, "SERVER_ERROR object too large for cache\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdSet, Keys: keys("d"), Data: []byte("1")}, "STORED\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdDelete, Keys: keys("d")}, "DELETED\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdDelete, Keys: keys("d")}, "NOT_FOUND\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdSet, Keys: keys("d"), Data: []byte("1")}, "STORED\r\n"},
		{105, protocol.Request{Cmd: protocol.CmdFlushAll, Delay: 10, HasDelay: true}, "OK\r\n"},
		{113, protocol.Request{Cmd: protocol.CmdGet, Keys: keys("d")}, "VALUE d 0 1\r\n1\r\nEND\r\n"},
		{114, protocol.Request{Cmd: protocol.CmdGet, Keys: keys("d")}, "END\r\n"},
		{114, protocol.Request{Cmd: protocol.CmdVerbosity, Level: 1}, "OK\r\n"},
		{114, protocol.Request{Cmd: protocol.CmdVersion}, "VERSION " + Version + "\r\n"},
		{114, protocol.Request{Cmd: protocol.CmdQuit}, "ERROR\r\n"},
	}
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		req := st.req
		got := string(b.Execute([]byte("prefix:"), &req, memT0.Add(time.Duration(st.at)*time.Second)))
		if got != "prefix:"+st.want {
			t.Fatalf("step %d %v %q: got %q, want %q", i, st.req.Cmd, st.req.Keys, got, "prefix:"+st.want)
		}
	}
}

// TestMemoryBackendCopiesRequestBytes: the request's key and data buffers
// are reused by the proxy after the call; the stored item must not change.
func TestMemoryBackendCopiesRequestBytes(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, data := []byte("k1"), []byte("v1")
	b.Execute(nil, &protocol.Request{Cmd: protocol.CmdSet, Keys: [][]byte{key}, Data: data}, memT0)
	copy(key, "k2")
	copy(data, "zz")
	if got := string(b.Execute(nil, &protocol.Request{Cmd: protocol.CmdGet, Keys: keys("k1")}, memT0)); got != "VALUE k1 0 2\r\nv1\r\nEND\r\n" {
		t.Fatalf("got %q", got)
	}
}

func TestMemoryBackendStats(t *testing.T) {
	b, err := New(Config{MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b.Execute(nil, &protocol.Request{Cmd: protocol.CmdSet, Keys: keys("k"), Data: []byte("v")}, memT0)
	got := string(b.Execute(nil, &protocol.Request{Cmd: protocol.CmdStats}, memT0))
	want := fmt.Sprintf("STAT curr_items 1\r\nSTAT bytes %d\r\nSTAT limit_maxbytes 1000\r\nSTAT evictions 0\r\nEND\r\n", memItemSize(1, 0, 1))
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestNewMemoryBackendErrors(t *testing.T) {
	if _, err := New(Config{MaxBytes: -1}); err == nil {
		t.Error("negative budget: no error")
	}
}

func BenchmarkMemoryBackendExecute(b *testing.B) {
	be, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	const nkeys = 1024
	ks := make([][]byte, nkeys)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("{user:%d}:w:%d", i, i%7))
		be.Execute(nil, &protocol.Request{Cmd: protocol.CmdSet, Keys: ks[i : i+1], Data: []byte("0")}, memT0)
	}
	cases := []struct {
		name string
		req  func(i int) protocol.Request
	}{
		{"get", func(i int) protocol.Request {
			return protocol.Request{Cmd: protocol.CmdGet, Keys: ks[i%nkeys : i%nkeys+1]}
		}},
		{"incr", func(i int) protocol.Request {
			return protocol.Request{Cmd: protocol.CmdIncr, Keys: ks[i%nkeys : i%nkeys+1], Delta: 1}
		}},
		{"set", func(i int) protocol.Request {
			return protocol.Request{Cmd: protocol.CmdSet, Keys: ks[i%nkeys : i%nkeys+1], Data: []byte("12345678"), Exptime: 60}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				var dst []byte
				i := int(seq.Add(1)) * 7919
				for pb.Next() {
					req := tc.req(i)
					dst = be.Execute(dst[:0], &req, memT0)
					i++
				}
				if len(dst) > 0 && !strings.HasSuffix(string(dst), "\r\n") {
					b.Errorf("reply %q", dst)
				}
			})
		})
	}
}
