package protocol

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestParseMeta(t *testing.T) {
	long := strings.Repeat("k", 251)
	flags18 := strings.Repeat(" s", 18)
	tests := []struct {
		name   string
		in     string
		n      int
		err    error
		cmd    Command
		key    string
		flags  string
		data   string
		quiet  bool
		base64 bool
	}{
		{name: "mg", in: "mg foo v k\r\n", n: 12, cmd: CmdMg, key: "foo", flags: " v k"},
		{name: "mg no flags", in: "mg foo\r\n", n: 8, cmd: CmdMg, key: "foo"},
		{name: "mg bare LF", in: "mg foo q\n", n: 9, cmd: CmdMg, key: "foo", flags: " q", quiet: true},
		{name: "mg base64", in: "mg Zm9v b v\r\n", n: 13, cmd: CmdMg, key: "Zm9v", flags: " b v", base64: true},
		{name: "mg alone", in: "mg\r\n", n: 4, err: ErrUnknownCommand},
		{name: "mg key too long", in: "mg " + long + " v\r\n", n: 258, err: ErrBadFormat},
		{name: "mg 17 flags", in: "mg k v k f t c s q u h l O1 T1 N1 R1 P L I\r\n", cmd: CmdMg, key: "k", flags: " v k f t c s q u h l O1 T1 N1 R1 P L I", quiet: true},
		{name: "mg 18 flags", in: "mg k" + flags18 + "\r\n", err: ErrMetaTooManyFlagsMg},
		{name: "mg duplicate", in: "mg k v v\r\n", err: ErrMetaDuplicateFlag},
		{name: "mg high byte", in: "mg k \xff\r\n", err: ErrMetaDuplicateFlag},
		{name: "mg unknown", in: "mg k x\r\n", err: ErrMetaInvalidFlag},
		{name: "mg bad N", in: "mg k N\r\n", err: ErrMetaBadToken},
		{name: "mg last error wins", in: "mg k Nx Dx\r\n", err: ErrMetaBadDelta},
		{name: "mg bad F keeps earlier", in: "mg k Nx Fx\r\n", err: ErrMetaBadToken},
		{name: "mg bad F alone", in: "mg k Fx\r\n", err: ErrBadFormat},
		{name: "mg bad base64", in: "mg a b\r\n", err: ErrMetaDecodingKey},
		{name: "mg unknown after error", in: "mg k Nx z\r\n", err: ErrMetaInvalidFlag},
		{name: "mg opaque too long is the shard's", in: "mg k O" + strings.Repeat("9", 32) + "\r\n", cmd: CmdMg, key: "k", flags: " O" + strings.Repeat("9", 32)},
		{name: "md opaque too long", in: "md k O" + strings.Repeat("9", 32) + "\r\n", err: ErrMetaOpaqueTooLong},
		{name: "ms opaque too long swallows", in: "ms k 1 O" + strings.Repeat("9", 32) + "\r\nx\r\n", n: 45, err: ErrMetaOpaqueTooLong},
		{name: "md bad flag", in: "md k Nx\r\n", err: ErrMetaFlagMd},
		{name: "md too many", in: "md k" + flags18 + "\r\n", err: ErrMetaTooManyFlags},
		{name: "ma mode", in: "ma k MZ\r\n", err: ErrMetaMaMode},
		{name: "ma mode length", in: "ma k MID\r\n", err: ErrMetaFlagMd},
		{name: "ma ok", in: "ma k N0 J13 v\r\n", n: 15, cmd: CmdMa, key: "k", flags: " N0 J13 v"},
		{name: "mn", in: "mn\r\n", n: 4, cmd: CmdMn},
		{name: "mn with junk", in: "mn x y\r\n", n: 8, cmd: CmdMn},
		{name: "me", in: "me k\r\n", n: 6, cmd: CmdMe, key: "k"},
		{name: "me alone", in: "me\r\n", err: ErrBadFormat},
		{name: "me b", in: "me Zm9v b\r\n", n: 11, cmd: CmdMe, key: "Zm9v", flags: " b", base64: true},
		{name: "me bad b", in: "me a b\r\n", err: ErrBadFormat},
		{name: "me ignores flags", in: "me k zz zz\r\n", n: 12, cmd: CmdMe, key: "k", flags: " zz zz"},
		{name: "mx", in: "mx k\r\n", err: ErrUnknownCommand},
		{name: "ms", in: "ms k 2 T0 q\r\nhi\r\n", n: 17, cmd: CmdMs, key: "k", flags: " T0 q", data: "hi", quiet: true},
		{name: "ms empty", in: "ms k 0\r\n\r\n", n: 10, cmd: CmdMs, key: "k", data: ""},
		{name: "ms incomplete", in: "ms k 2\r\nh", n: 12, err: ErrIncomplete},
		{name: "ms no length", in: "ms k\r\nhi\r\n", n: 6, err: ErrBadFormat},
		{name: "ms bad length", in: "ms k x\r\nhi\r\n", n: 8, err: ErrBadFormat},
		{name: "ms negative length", in: "ms k -1\r\n", n: 9, err: ErrBadFormat},
		{name: "ms bad flag swallows", in: "ms k 2 zz\r\nhi\r\n", n: 15, err: ErrMetaInvalidFlag},
		{name: "ms bad mode swallows", in: "ms k 2 MZ\r\nhi\r\n", n: 15, err: ErrMetaMsMode},
		{name: "ms too many", in: "ms k 1" + strings.Repeat(" s", 17) + "\r\n", err: ErrMetaTooManyFlags},
		{name: "ms bad chunk", in: "ms k 2\r\nhix\r\n", n: 12, err: ErrBadDataChunk},
		{name: "ms too large", in: "ms k 2000000\r\n", n: 14 + 2000002, err: ErrTooLarge, cmd: CmdMs, key: "k", flags: ""},
		{name: "ms nul ends line", in: "ms k 2\x00 zz\r\nhi\r\n", n: 16, cmd: CmdMs, key: "k", data: "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Request
			n, err := Parse([]byte(tt.in), Limits{}, &r)
			if err != tt.err {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.n != 0 && n != tt.n {
				t.Errorf("n = %d, want %d", n, tt.n)
			}
			if tt.cmd == CmdNone {
				return
			}
			if r.Cmd != tt.cmd || string(r.Key()) != tt.key || string(r.MetaFlags) != tt.flags ||
				string(r.Data) != tt.data || r.Quiet != tt.quiet || r.Base64 != tt.base64 || r.Noreply {
				t.Errorf("got %v key %q flags %q data %q quiet %v b64 %v noreply %v", r.Cmd, r.Key(), r.MetaFlags, r.Data, r.Quiet, r.Base64, r.Noreply)
			}
		})
	}
}

func TestMetaAppendWire(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"mg  foo v\n", "mg  foo v\r\n"},
		{"mg foo v q O1\r\n", "mg foo v q O1\r\nmn\r\n"},
		{"ms k 2 q\r\nhi\r\n", "ms k 2 q\r\nhi\r\nmn\r\n"},
		{"ma k N0 J13 v\r\n", "ma k N0 J13 v\r\n"},
		{"mn junk\r\n", "mn\r\n"},
	} {
		var r Request
		if _, err := Parse([]byte(tt.in), Limits{}, &r); err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if got := string(r.AppendWire(nil)); got != tt.want {
			t.Errorf("%q: wire %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMetaReplyLen(t *testing.T) {
	quiet := &Request{Cmd: CmdMg, Quiet: true}
	loud := &Request{Cmd: CmdMg}
	for _, tt := range []struct {
		name  string
		req   *Request
		in    string
		n     int
		isErr bool
	}{
		{"HD", loud, "HD\r\nEN\r\n", 4, false},
		{"VA", loud, "VA 2 kx\r\nhi\r\nEN\r\n", 13, false},
		{"VA partial", loud, "VA 2 kx\r\nh", 13, true},
		{"VA bad end", loud, "VA 2\r\nhixx", 0, true},
		{"VA no length", loud, "VA x\r\n", 0, true},
		{"quiet nothing", quiet, "MN\r\nHD\r\n", 4, false},
		{"quiet hit", quiet, "VA 2\r\nMN\r\nMN\r\n", 14, false},
		{"quiet error", quiet, "CLIENT_ERROR x\r\nMN\r\n", 20, false},
		{"quiet partial", quiet, "EN\r\nM", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ReplyLen([]byte(tt.in), tt.req)
			if (err != nil) != tt.isErr || n != tt.n {
				t.Errorf("n %d err %v, want %d (error %v)", n, err, tt.n, tt.isErr)
			}
		})
	}
}

func TestDecodeMetaKey(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // "" means failure
	}{
		{"Zm9v", "foo"}, {"Zm8=", "fo"}, {"Zg==", "f"}, {"Zm9vYmFy", "foobar"},
		{"Zm9v=", ""}, {"a", ""}, {"====", ""}, {"Z===", ""}, {"!Zm9v", "foo"},
		{"Zg==Zm9v", "f"}, {"Zm=v", "f`"},
	} {
		var dst [MaxKeyLen]byte
		n := DecodeMetaKey(dst[:], []byte(tt.in))
		if string(dst[:n]) != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, dst[:n], tt.want)
		}
	}
	if got := string(AppendMetaKey(nil, []byte{0, 1, 2, 0xff}, true)); got != "kAAEC/w== b" {
		t.Errorf("appendMetaKey: %q", got)
	}
}

// TestParseMetaAllocs: parsing meta requests allocates nothing once the
// Request's Keys have capacity, like the text protocol.
func TestParseMetaAllocs(t *testing.T) {
	buf := []byte("mg Zm9v b v k O1\r\nms k 2 T0 q\r\nhi\r\nma k N0 J13 v\r\nmn\r\n")
	var r Request
	allocs := testing.AllocsPerRun(100, func() {
		for off := 0; off < len(buf); {
			n, err := Parse(buf[off:], Limits{}, &r)
			if err != nil {
				t.Fatal(err)
			}
			off += n
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
}

func BenchmarkParseMeta(b *testing.B) {
	buf := []byte("mg Zm9v b v k O1\r\nms k 2 T0 q\r\nhi\r\nma k N0 J13 v\r\nmn\r\n")
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		for off := 0; off < len(buf); {
			n, _ := Parse(buf[off:], Limits{}, &r)
			off += n
		}
	}
}

// FuzzParseMeta: meta parsing never panics, spans at least its line, keeps
// its slices inside the buffer, forwards a line that parses back the same,
// and decodes b keys like encoding/base64 for canonical input.
func FuzzParseMeta(f *testing.F) {
	for _, s := range []string{"mg foo v k O1 q\r\n", "ms k 2 T0 F5 q\r\nhi\r\n", "ma k N0 J13 v\r\n", "md Zm9v b q\r\n", "me k\r\n", "mn\r\n", "mg k Nx Dx\r\n", "ms k 1 MZ\r\nx\r\n"} {
		f.Add([]byte(s), []byte("key"))
	}
	lim := Limits{MaxLine: 512, MaxItemSize: 1024}
	f.Fuzz(func(t *testing.T, buf, key []byte) {
		var r Request
		n, err := Parse(buf, lim, &r)
		if err == nil && r.Cmd.IsMeta() {
			if n <= 0 || n > len(buf) {
				t.Fatalf("n = %d for %q", n, buf)
			}
			if !bytes.HasPrefix(buf, r.Line) && !bytes.Contains(buf, r.Line) {
				t.Fatalf("line %q not in buffer", r.Line)
			}
			wire := r.AppendWire(nil)
			var r2 Request
			n2, err2 := Parse(wire, lim, &r2)
			if err2 != nil || r2.Cmd != r.Cmd || !bytes.Equal(r2.Key(), r.Key()) || r2.Quiet != r.Quiet || !bytes.Equal(r2.Data, r.Data) {
				t.Fatalf("%q forwarded as %q parses as %v %v", buf, wire, r2.Cmd, err2)
			}
			if r.Quiet && !bytes.HasSuffix(wire, []byte("mn\r\n")) || n2 > len(wire) {
				t.Fatalf("wire %q", wire)
			}
		}
		var re *ReplyError
		if err != nil && errors.As(err, &re) && n <= 0 {
			t.Fatalf("reply error %v with n %d", err, n)
		}
		if len(key) > 0 && len(key) <= 180 {
			enc := base64.StdEncoding.EncodeToString(key)
			var dst [MaxKeyLen]byte
			m := DecodeMetaKey(dst[:], []byte(enc))
			if !bytes.Equal(dst[:m], key) {
				t.Fatalf("decode(%q) = %q, want %q", enc, dst[:m], key)
			}
			if got := string(AppendBase64(nil, key)); got != enc {
				t.Fatalf("appendBase64(%q) = %q, want %q", key, got, enc)
			}
		}
	})
}
