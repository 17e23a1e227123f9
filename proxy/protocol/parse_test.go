package protocol

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("a", 251)
	tests := []struct {
		name    string
		in      string
		wantN   int // 0: len(in)
		wantErr error
		check   func(t *testing.T, r *Request)
	}{
		{name: "get one", in: "get k\r\n", check: wantKeys("k")},
		{name: "get many spaces", in: "get  a   b  \r\n", check: wantKeys("a", "b")},
		{name: "bare LF", in: "get k\n", check: wantKeys("k")},
		{name: "gets", in: "gets a b c\r\n", check: wantKeys("a", "b", "c")},
		{name: "gat", in: "gat 10 a b\r\n", check: func(t *testing.T, r *Request) {
			wantKeys("a", "b")(t, r)
			if r.Exptime != 10 || r.Cmd != CmdGat {
				t.Errorf("%+v", r)
			}
		}},
		{name: "gat no keys", in: "gat 10\r\n", check: wantKeys()},
		{name: "gat bad exptime", in: "gat x k\r\n", wantErr: ErrBadExptime},
		{name: "get alone", in: "get\r\n", wantErr: ErrUnknownCommand},
		{name: "get long key", in: "get k " + long + "\r\n", wantErr: ErrBadFormat},
		{name: "get control byte", in: "get k\x01\r\n", wantErr: ErrBadFormat},
		{name: "get CR inside", in: "get k\rx\r\n", wantErr: ErrBadFormat},
		{name: "tab is not a separator", in: "get\tk\r\n", wantErr: ErrUnknownCommand},
		{name: "set", in: "set k 5 -1 3\r\nabc\r\n", check: func(t *testing.T, r *Request) {
			if r.Cmd != CmdSet || string(r.Key()) != "k" || r.Flags != 5 || r.Exptime != -1 || string(r.Data) != "abc" || r.Noreply {
				t.Errorf("%+v", r)
			}
		}},
		{name: "set noreply", in: "set k 0 0 1 noreply\r\na\r\n", check: func(t *testing.T, r *Request) {
			if !r.Noreply {
				t.Error("noreply not set")
			}
		}},
		{name: "set junk sixth token", in: "set k 0 0 1 junk\r\na\r\n", check: func(t *testing.T, r *Request) {
			if r.Noreply {
				t.Error("noreply set")
			}
		}},
		{name: "flags truncated to 32 bits", in: "set k 4294967297 0 1\r\na\r\n", check: func(t *testing.T, r *Request) {
			if r.Flags != 1 {
				t.Errorf("flags %d", r.Flags)
			}
		}},
		{name: "set empty value", in: "set k 0 0 0\r\n\r\n", check: func(t *testing.T, r *Request) {
			if len(r.Data) != 0 {
				t.Errorf("data %q", r.Data)
			}
		}},
		{name: "set incomplete data", in: "set k 0 0 5\r\nab", wantN: len("set k 0 0 5\r\n") + 7, wantErr: ErrIncomplete},
		{name: "incomplete line", in: "get k", wantN: -1, wantErr: ErrIncomplete},
		{name: "set bad chunk", in: "set k 0 0 1\r\nab\r\n", wantN: len("set k 0 0 1\r\nab\r"), wantErr: ErrBadDataChunk},
		{name: "set bad flags", in: "set k x 0 1\r\na\r\n", wantN: len("set k x 0 1\r\n"), wantErr: ErrBadFormat},
		{name: "set negative flags", in: "set k -1 0 1\r\na\r\n", wantN: len("set k -1 0 1\r\n"), wantErr: ErrBadFormat},
		{name: "set negative length", in: "set k 0 0 -1\r\n", wantErr: ErrBadFormat},
		{name: "length wraps to negative", in: "set k 0 0 2147483648\r\n", wantErr: ErrBadFormat},
		{name: "length wraps to 0", in: "set k 0 0 4294967296\r\n\r\n", check: func(t *testing.T, r *Request) {
			if len(r.Data) != 0 {
				t.Errorf("data %q", r.Data)
			}
		}},
		{name: "exptime wraps", in: "set k 0 4294967396 1\r\na\r\n", check: func(t *testing.T, r *Request) {
			if r.Exptime != 100 {
				t.Errorf("exptime %d", r.Exptime)
			}
		}},
		{name: "exptime int64 overflow", in: "touch k 9223372036854775808\r\n", wantErr: ErrBadExptime},
		{name: "set too few tokens", in: "set k 0 0\r\n", wantErr: ErrUnknownCommand},
		{name: "set too many tokens", in: "set k 0 0 1 2 3\r\n", wantErr: ErrUnknownCommand},
		{name: "set long key", in: "set " + long + " 0 0 1\r\na\r\n", wantN: len("set " + long + " 0 0 1\r\n"), wantErr: ErrBadFormat},
		{name: "set too large swallowed", in: "set k 0 0 2000000\r\n", wantN: len("set k 0 0 2000000\r\n") + 2000002, wantErr: ErrTooLarge},
		{name: "set at item limit", in: "set k 0 0 1048516\r\n", wantN: len("set k 0 0 1048516\r\n") + 1048518, wantErr: ErrIncomplete},
		{name: "set over item limit", in: "set k 0 0 1048517\r\n", wantN: len("set k 0 0 1048517\r\n") + 1048519, wantErr: ErrTooLarge},
		{name: "cas", in: "cas k 0 0 1 99\r\na\r\n", check: func(t *testing.T, r *Request) {
			if r.Cmd != CmdCas || r.Cas != 99 {
				t.Errorf("%+v", r)
			}
		}},
		{name: "cas without unique", in: "cas k 0 0 1\r\n", wantErr: ErrUnknownCommand},
		{name: "cas bad unique", in: "cas k 0 0 1 x\r\n", wantErr: ErrBadFormat},
		{name: "incr", in: "incr k 18446744073709551615\r\n", check: func(t *testing.T, r *Request) {
			if r.Delta != 1<<64-1 {
				t.Errorf("delta %d", r.Delta)
			}
		}},
		{name: "incr overflow", in: "incr k 18446744073709551616\r\n", wantErr: ErrBadDelta},
		{name: "incr negative", in: "incr k -1\r\n", wantErr: ErrBadDelta},
		{name: "incr missing delta", in: "incr k\r\n", wantErr: ErrUnknownCommand},
		{name: "decr noreply", in: "decr k 1 noreply\r\n", check: func(t *testing.T, r *Request) {
			if !r.Noreply || r.Cmd != CmdDecr {
				t.Errorf("%+v", r)
			}
		}},
		{name: "touch", in: "touch k 100\r\n", check: wantKeys("k")},
		{name: "touch bad exptime", in: "touch k x\r\n", wantErr: ErrBadExptime},
		{name: "delete", in: "delete k\r\n", check: wantKeys("k")},
		{name: "delete 0", in: "delete k 0\r\n", check: wantKeys("k")},
		{name: "delete 0 noreply", in: "delete k 0 noreply\r\n", check: wantKeys("k")},
		{name: "delete hold", in: "delete k 5\r\n", wantErr: ErrBadDelete},
		{name: "delete long key", in: "delete " + long + "\r\n", wantErr: ErrBadFormat},
		{name: "flush_all", in: "flush_all\r\n", check: func(t *testing.T, r *Request) {
			if r.HasDelay {
				t.Error("delay")
			}
		}},
		{name: "flush_all delay noreply", in: "flush_all 10 noreply\r\n", check: func(t *testing.T, r *Request) {
			if !r.HasDelay || r.Delay != 10 || !r.Noreply {
				t.Errorf("%+v", r)
			}
		}},
		{name: "flush_all bad", in: "flush_all x\r\n", wantErr: ErrBadExptime},
		{name: "verbosity", in: "verbosity 1\r\n", check: func(t *testing.T, r *Request) {
			if r.Level != 1 {
				t.Errorf("%+v", r)
			}
		}},
		{name: "verbosity alone", in: "verbosity\r\n", wantErr: ErrUnknownCommand},
		{name: "verbosity bad", in: "verbosity x\r\n", wantErr: ErrBadFormat},
		{name: "version", in: "version\r\n"},
		{name: "stats", in: "stats\r\n"},
		{name: "stats sub", in: "stats items\r\n", wantErr: ErrUnknownCommand},
		{name: "quit", in: "quit\r\n", wantErr: ErrQuit},
		{name: "unknown", in: "foo\r\n", wantErr: ErrUnknownCommand},
		{name: "uppercase", in: "GET k\r\n", wantErr: ErrUnknownCommand},
		{name: "empty line", in: "\r\n", wantErr: ErrUnknownCommand},
		{name: "binary", in: "\x80\x00", wantN: -1, wantErr: ErrBinaryProtocol},
		{name: "line too long", in: strings.Repeat("x", 3000), wantN: -1, wantErr: ErrLineTooLong},
		{name: "long get line ok", in: "get " + strings.Repeat("k ", 2000) + "\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			n, err := Parse([]byte(tt.in), Limits{}, &r)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			want := tt.wantN
			if want == 0 {
				want = len(tt.in)
			}
			if want == -1 {
				want = 0
			}
			if n != want {
				t.Errorf("n = %d, want %d", n, want)
			}
			if tt.check != nil {
				tt.check(t, &r)
			}
		})
	}
}

func wantKeys(want ...string) func(t *testing.T, r *Request) {
	return func(t *testing.T, r *Request) {
		t.Helper()
		if len(r.Keys) != len(want) {
			t.Fatalf("keys %q, want %q", r.Keys, want)
		}
		for i := range want {
			if string(r.Keys[i]) != want[i] {
				t.Fatalf("keys %q, want %q", r.Keys, want)
			}
		}
	}
}

func TestAppendWireRoundTrip(t *testing.T) {
	for _, in := range []string{
		"get a b c\r\n", "gats 5 a\r\n", "set k 1 2 3\r\nabc\r\n", "cas k 0 0 1 7\r\nx\r\n",
		"incr k 5\r\n", "decr k 5\r\n", "touch k -1\r\n", "delete k\r\n", "flush_all\r\n",
		"flush_all 9\r\n", "verbosity 1\r\n", "append k 0 0 1\r\nx\r\n",
	} {
		var r Request
		if _, err := Parse([]byte(in), Limits{}, &r); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := string(r.AppendWire(nil)); got != in {
			t.Errorf("AppendWire = %q, want %q", got, in)
		}
	}
	var r Request
	if _, err := Parse([]byte("set k 0 0 1 noreply\r\nx\r\n"), Limits{}, &r); err != nil {
		t.Fatal(err)
	}
	if got := string(r.AppendWire(nil)); got != "set k 0 0 1\r\nx\r\n" {
		t.Errorf("noreply forwarded: %q", got)
	}
}

// fuzzSeedsFromTranscripts decodes the steps of testdata/transcripts/*.txt (see its
// README) into request streams.
func fuzzSeedsFromTranscripts(t testing.TB) [][]byte {
	files, _ := filepath.Glob("../../testdata/transcripts/*.txt")
	var seeds [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var step []byte
		flush := func() {
			if len(step) > 0 {
				seeds = append(seeds, step)
				step = nil
			}
		}
		for _, line := range strings.Split(string(data), "\n") {
			switch {
			case line == "":
				flush()
			case strings.HasPrefix(line, "#"), strings.HasPrefix(line, "!"):
			default:
				step = append(step, decodeSeedEscapes(t, line)...)
			}
		}
		flush()
	}
	return seeds
}

// decodeSeedEscapes is the bytes one transcript line sends, for the lines
// written without escapes; a line with one (\r, \x.., \[N]c, ...) gives
// nothing: its decoder is the differential test's, in package proxy, and
// the plain lines are seeds enough.
func decodeSeedEscapes(_ testing.TB, line string) []byte {
	if strings.Contains(line, `\`) {
		return nil
	}
	return []byte(line + "\r\n")
}

// FuzzParse: Parse never panics, respects declared lengths, returns slices
// inside the buffer, and a valid request re-encoded parses to the same.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeedsFromTranscripts(f) {
		f.Add(s)
	}
	for _, s := range []string{"get a b\r\n", "set k 0 0 1\r\na\r\n", "gat 1 k\r\n", "cas k 0 0 1 2 noreply\r\nx\r\n", "\x80", "delete k 0 noreply\r\n"} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxLine: 512, MaxGetLine: 4096, MaxItemSize: 1024}
	f.Fuzz(func(t *testing.T, buf []byte) {
		var r Request
		for off := 0; off < len(buf); {
			in := buf[off:]
			n, err := Parse(in, lim, &r)
			if err == ErrIncomplete || err == ErrLineTooLong || err == ErrBinaryProtocol || err == ErrQuit {
				return
			}
			if n <= 0 {
				t.Fatalf("n = %d for %q (err %v)", n, in, err)
			}
			if err != nil {
				var re *ReplyError
				if !errors.As(err, &re) {
					t.Fatalf("unexpected error %v", err)
				}
				off += n
				continue
			}
			if n > len(in) {
				t.Fatalf("n = %d > len %d", n, len(in))
			}
			for _, k := range r.Keys {
				if !ValidKey(k) || cap(in)-cap(k) < 0 || cap(in)-cap(k)+len(k) > n {
					t.Fatalf("key %q outside the request", k)
				}
			}
			if r.Cmd.IsStorage() {
				if len(r.Data) > lim.MaxItemSize || cap(in)-cap(r.Data)+len(r.Data)+2 != n {
					t.Fatalf("data of %d bytes at the wrong place (n %d)", len(r.Data), n)
				}
				// Round trip through the wire form.
				var r2 Request
				wire := r.AppendWire(nil)
				n2, err := Parse(wire, lim, &r2)
				if err != nil || n2 != len(wire) || !bytes.Equal(r2.Data, r.Data) || !bytes.Equal(r2.Key(), r.Key()) || r2.Flags != r.Flags || r2.Exptime != r.Exptime || r2.Cas != r.Cas {
					t.Fatalf("round trip %q: %v %+v vs %+v", wire, err, r2, r)
				}
			}
			off += n
		}
	})
}

func BenchmarkParse(b *testing.B) {
	cases := map[string]string{
		"get":     "get rl:{user:12345}:1700000000\r\n",
		"incr":    "incr rl:{user:12345}:1700000000 1\r\n",
		"set":     "set rl:{user:12345}:1700000000 0 120 2\r\n42\r\n",
		"get10":   "get " + strings.Repeat("rl:{user:12345}:1700000000 ", 10) + "\r\n",
		"garbage": "bogus command here\r\n",
	}
	for name, in := range cases {
		b.Run(name, func(b *testing.B) {
			buf := []byte(in)
			var r Request
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Parse(buf, Limits{}, &r); err != nil && name != "garbage" {
					b.Fatal(err)
				}
			}
		})
	}
}
