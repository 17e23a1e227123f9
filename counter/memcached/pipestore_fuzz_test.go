package memcached

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter"
)

// FuzzPipeRoundTrip: a reply the pipelining client's store verbs would
// receive from memcached for a legal key, a value and a cas id (VALUE
// block, incr result, storage result) parses back to exactly what was
// encoded, and whatever a reply line says, the parsers fail only with the
// package's errors (a protocol error or a store sentinel) or the reader's
// end of input.
func FuzzPipeRoundTrip(f *testing.F) {
	f.Add("r{ip|203.0.113.7}s1aao.htkj0", []byte("17"), uint64(77), uint64(18), "STORED")
	f.Add("k", []byte("\r\nEND\r\n"), uint64(0), uint64(1<<63), "NOT_STORED")
	f.Add("r{~Zm9v}t1", []byte{}, uint64(1), uint64(0), "EXISTS")
	f.Add("k\u00a0x", []byte("1"), uint64(5), uint64(9), "SERVER_ERROR out of memory")
	f.Fuzz(func(t *testing.T, key string, value []byte, cas, num uint64, line string) {
		if legalKey(key) && len(value) <= 1<<20 {
			reply := "VALUE " + key + " 0 " + strconv.Itoa(len(value)) + " " + strconv.FormatUint(cas, 10) + "\r\n" + string(value) + "\r\nEND\r\n"
			out := map[string][]byte{}
			var got uint64
			if err := pipeFrom(reply).values(out, &got); err != nil || len(out) != 1 || !bytes.Equal(out[key], value) || got != cas {
				t.Fatalf("%q: values %q cas %d err %v", reply, out, got, err)
			}
		}
		if v, err := pipeFrom(strconv.FormatUint(num, 10) + "\r\n").numReply(); err != nil || v != num {
			t.Fatalf("incr reply %d read as %d, %v", num, v, err)
		}
		known := func(err error) bool {
			return err == nil || errors.Is(err, ErrProtocol) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
				errors.Is(err, counter.ErrNotFound) || errors.Is(err, counter.ErrNotStored) || errors.Is(err, counter.ErrCASConflict)
		}
		for _, in := range []string{line, line + "\r\n"} {
			if err := pipeFrom(in).storeReply(); !known(err) {
				t.Fatalf("storeReply(%q): %v", in, err)
			}
			if _, err := pipeFrom(in).numReply(); !known(err) {
				t.Fatalf("numReply(%q): %v", in, err)
			}
			if err := pipeFrom(in).values(map[string][]byte{}, nil); !known(err) {
				t.Fatalf("values(%q): %v", in, err)
			}
		}
	})
}

// legalKey reports whether k is a memcached key the store verbs send: 1 to
// 250 bytes, none of them a space or a control byte.
func legalKey(k string) bool {
	return len(k) > 0 && len(k) <= 250 && !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f })
}
