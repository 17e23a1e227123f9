package memcached

import (
	"bufio"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter"
)

func pipeFrom(s string) *pipeConn {
	return &pipeConn{r: bufio.NewReader(strings.NewReader(s))}
}

func TestPipeReplies(t *testing.T) {
	out := map[string][]byte{}
	var cas uint64
	if err := pipeFrom("VALUE k 0 2 77\r\n12\r\nEND\r\n").values(out, &cas); err != nil || string(out["k"]) != "12" || cas != 77 {
		t.Fatalf("gets: %q %d %v", out, cas, err)
	}
	if v, err := pipeFrom("9   \r\n").numReply(); err != nil || v != 9 {
		t.Fatalf("padded incr reply: %d %v", v, err)
	}
	for reply, want := range map[string]error{"STORED\r\n": nil, "NOT_STORED\r\n": counter.ErrNotStored, "EXISTS\r\n": counter.ErrCASConflict, "NOT_FOUND\r\n": counter.ErrNotFound} {
		if err := pipeFrom(reply).storeReply(); err != want {
			t.Fatalf("%q: %v", reply, err)
		}
	}
	for _, bad := range []string{"VALUE k 0 5\r\n12\r\nEND\r\n", "SERVER_ERROR out of memory\r\n", "VALUE k 0 -1\r\n", "VALUE k\r\n", "END"} {
		if err := pipeFrom(bad).values(map[string][]byte{}, nil); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// FuzzPipeReplies: the reply parsers never panic and never return more
// bytes than a VALUE line declares.
func FuzzPipeReplies(f *testing.F) {
	for _, s := range []string{"VALUE r{ip|1}s1bk0.abc 0 3\r\n100\r\nEND\r\n", "VALUE k 0 2 77\r\n12\r\nEND\r\n",
		"STORED\r\n", "NOT_FOUND\r\n", "42\r\n", "ERROR\r\n", "CLIENT_ERROR bad\r\n", "VALUE k 0 99999999999\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := map[string][]byte{}
		var cas uint64
		if err := pipeFrom(s).values(out, &cas); err == nil {
			for k, v := range out {
				if !strings.Contains(s, k) || len(v) > len(s) {
					t.Fatalf("value %q=%q not from %q", k, v, s)
				}
			}
		}
		_, _ = pipeFrom(s).numReply()
		_ = pipeFrom(s).storeReply()
	})
}
