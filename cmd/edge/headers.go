package main

import (
	"bytes"
	"iter"
)

// fieldSet is the part of fasthttp's request and response headers that
// delFields uses.
type fieldSet interface {
	All() iter.Seq2[[]byte, []byte]
	Peek(key string) []byte
	Del(key string)
	AddBytesKV(key, value []byte)
}

// Fields fasthttp keeps apart from the others (and writes first): their
// order among the rest is fasthttp's, not the message's.
var (
	requestApart  = []string{"Host", "Content-Length", "Content-Type", "User-Agent", "Trailer", "Cookie"}
	responseApart = []string{"Content-Length", "Content-Type", "Content-Encoding", "Server", "Set-Cookie", "Trailer"}
)

// fieldScratch is delFields' reusable memory (one per view).
type fieldScratch struct {
	buf  []byte
	kept [][4]int // key and value of each kept field: buf[k0:k1], buf[v0:v1]
}

// delFields deletes the fields named in del from h and keeps the others in
// their order. fasthttp's Del moves the last field into the deleted one's
// place: harmless between fields of different names, whose order carries
// nothing (RFC 9110 5.3), but fields of one name are an ordered list (Link,
// WWW-Authenticate, Via) a proxy must not reorder, so when h has such
// fields the others are deleted and added back in order. apart names the
// fields h keeps apart, which delFields leaves alone.
func (s *fieldScratch) delFields(h fieldSet, apart []string, del []string) {
	present := false
	for _, name := range del {
		if h.Peek(name) != nil {
			present = true
			break
		}
	}
	if !present {
		for _, name := range del {
			h.Del(name) // an empty field Peek does not see; absent ones cost a scan
		}
		return
	}
	s.buf, s.kept = s.buf[:0], s.kept[:0]
	repeated := false
	for k, v := range h.All() {
		if hasFold(apart, k) || hasFold(del, k) {
			continue
		}
		for _, f := range s.kept {
			repeated = repeated || bytes.EqualFold(s.buf[f[0]:f[1]], k)
		}
		k0 := len(s.buf)
		s.buf = append(s.buf, k...)
		v0 := len(s.buf)
		s.buf = append(s.buf, v...)
		s.kept = append(s.kept, [4]int{k0, v0, v0, len(s.buf)})
	}
	for _, name := range del {
		h.Del(name)
	}
	if !repeated {
		return
	}
	for _, f := range s.kept {
		h.Del(string(s.buf[f[0]:f[1]])) // the first of a name deletes them all
	}
	for _, f := range s.kept {
		h.AddBytesKV(s.buf[f[0]:f[1]], s.buf[f[2]:f[3]])
	}
}

func hasFold(names []string, k []byte) bool {
	for _, n := range names {
		if equalFoldASCII(n, k) {
			return true
		}
	}
	return false
}

// equalFoldASCII is bytes.EqualFold for field names (tokens: ASCII).
func equalFoldASCII(n string, k []byte) bool {
	if len(n) != len(k) {
		return false
	}
	for i := range len(n) {
		if n[i]|0x20 != k[i]|0x20 {
			return false
		}
	}
	return true
}
