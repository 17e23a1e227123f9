package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// metaStream is a pipelined meta-protocol session: a quiet pipeline closed
// by mn over keys on every shard, ma autovivify, base64 keys, opaques and
// errors. It ends with a marker reply (metaEnd).
const metaStream = "ms a 1 q T0\r\n1\r\nms b 1 q\r\n2\r\nms {x}c 1 q\r\n3\r\n" +
	"mg a v q k O1\r\nmg nope v q k\r\nmg b v q\r\nmg {x}c q v\r\nmd nope q\r\nmd a q\r\nmg a v q\r\nmn\r\n" +
	"ma cnt N0 J13 v\r\nma cnt v\r\nma cnt MD D20 v\r\nma q1 q N0 J5\r\nma q1 q N0 J5\r\nmg q1 v\r\nmn\r\n" +
	"ms Zm9v 3 b k\r\nbar\r\nmg foo v k\r\nmg Zm9v b v k O7\r\nmd AAEC/w== b q k\r\nmn\r\n" +
	"mg a zz\r\nmg a v v\r\nms k 1 MZ\r\nx\r\nma k Jx\r\nmg\r\nmz\r\nmn\r\n" +
	"ms zzend 3\r\nend\r\nmg zzend v O999\r\n"

const metaEnd = "VA 3 O999\r\nend\r\n"

// metaSession sends metaStream to addr and returns everything up to and
// including metaEnd.
func metaSession(t *testing.T, addr string) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, metaStream); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var out []byte
	for !bytes.HasSuffix(out, []byte(metaEnd)) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		out = append(out, b)
	}
	return out
}

// TestMcproxyMeta: the mcproxy binary, in front of three memcached shards
// and with three embedded shards, answers a pipelined meta session byte for
// byte as one memcached 1.6.18 does (raw socket, no client library).
func TestMcproxyMeta(t *testing.T) {
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 4)
	want := metaSession(t, ms[0].Addr)
	args := []string{"--hash-tag", "{}"}
	for _, m := range ms[1:] {
		args = append(args, "--shard", m.Addr)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"memcached shards", args},
		{"embedded", []string{"--embedded", "3", "--hash-tag", "{}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startMcproxy(t, bin, "", tc.args...)
			if got := metaSession(t, p.addr); !bytes.Equal(got, want) {
				t.Errorf("mcproxy:\n%q\nmemcached:\n%q", got, want)
			}
			p.stop(t)
		})
	}
}
