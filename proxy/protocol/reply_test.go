package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func TestReplyLen(t *testing.T) {
	get := &Request{Cmd: CmdGet}
	incr := &Request{Cmd: CmdIncr}
	tests := []struct {
		name     string
		req      *Request
		in       string
		wantN    int
		wantErr  error
		wantNeed int // with ErrIncomplete: the total length announced
	}{
		{"stored", &Request{Cmd: CmdSet}, "STORED\r\nEXTRA", 8, nil, 0},
		{"number", incr, "42\r\n", 4, nil, 0},
		{"not found", incr, "NOT_FOUND\r\n", 11, nil, 0},
		{"line incomplete", incr, "4", 0, ErrIncomplete, 0},
		{"empty", incr, "", 0, ErrIncomplete, 0},
		{"miss", get, "END\r\nSTORED\r\n", 5, nil, 0},
		{"hit", get, "VALUE k 0 1\r\na\r\nEND\r\n", 21, nil, 0},
		{"hit cas", &Request{Cmd: CmdGets}, "VALUE k 3 2 99\r\nab\r\nEND\r\n", 25, nil, 0},
		{"two hits", get, "VALUE a 0 1\r\n1\r\nVALUE b 0 2\r\n22\r\nEND\r\n", 38, nil, 0},
		{"value with CRLF inside", get, "VALUE k 0 4\r\n\r\n\r\n\r\nEND\r\n", 24, nil, 0},
		{"error line", get, "SERVER_ERROR out of memory\r\n", 28, nil, 0},
		{"header only", get, "VALUE k 0 5\r\n", 20, ErrIncomplete, 20},
		{"data cut", get, "VALUE k 0 5\r\nab", 20, ErrIncomplete, 20},
		{"end missing", get, "VALUE k 0 1\r\na\r\nEN", 0, ErrIncomplete, 0},
		{"bad length", get, "VALUE k 0 x\r\na\r\nEND\r\n", 0, ErrBadReply, 0},
		{"length too big", get, "VALUE k 0 99999999999\r\n", 0, ErrBadReply, 0},
		{"data not ended", get, "VALUE k 0 1\r\nabEND\r\n", 0, ErrBadReply, 0},
		{"no flags", get, "VALUE k\r\n", 0, ErrBadReply, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ReplyLen([]byte(tt.in), tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("replyLen(%q) err = %v, want %v", tt.in, err, tt.wantErr)
			}
			if err == nil && n != tt.wantN {
				t.Fatalf("replyLen(%q) = %d, want %d", tt.in, n, tt.wantN)
			}
			if err == ErrIncomplete && n != tt.wantNeed {
				t.Fatalf("replyLen(%q) need = %d, want %d", tt.in, n, tt.wantNeed)
			}
		})
	}
	t.Run("long line", func(t *testing.T) {
		if _, err := ReplyLen(bytes.Repeat([]byte("x"), maxReplyLine+1), incr); !errors.Is(err, ErrBadReply) {
			t.Fatalf("err = %v, want ErrBadReply", err)
		}
	})
}

// FuzzReplyLen: ReplyLen never panics, never claims more bytes than it
// was given, and a complete reply is a prefix that parses the same alone
// and whose every strict prefix is incomplete.
func FuzzReplyLen(f *testing.F) {
	for _, s := range []string{
		"STORED\r\n", "42\r\n", "END\r\n", "VALUE k 0 1\r\na\r\nEND\r\n",
		"VALUE k 3 2 99\r\nab\r\nEND\r\n", "VALUE a 0 1\r\n1\r\nVALUE b 0 2\r\n22\r\nEND\r\n",
		"VALUE k 0 5\r\nab", "SERVER_ERROR x\r\n", "VALUE k 0 -1\r\n",
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, buf []byte, retrieval bool) {
		req := &Request{Cmd: CmdIncr}
		if retrieval {
			req.Cmd = CmdGet
		}
		n, err := ReplyLen(buf, req)
		if err != nil {
			return
		}
		if n <= 0 || n > len(buf) || buf[n-1] != '\n' {
			t.Fatalf("replyLen(%q) = %d", buf, n)
		}
		if m, err := ReplyLen(buf[:n], req); err != nil || m != n {
			t.Fatalf("prefix %q: %d %v, want %d", buf[:n], m, err, n)
		}
		for i := 0; i < n; i++ {
			if m, err := ReplyLen(buf[:i], req); err == nil {
				t.Fatalf("strict prefix %q complete (%d) though %q is %d", buf[:i], m, buf, n)
			}
		}
	})
}
