package main

import (
	"bytes"
	"iter"
	"slices"
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

// delFields deletes the fields named in del from h and keeps the others in
// their order. fasthttp's Del moves the last field into the deleted one's
// place, which reorders fields of one name, and a proxy must not (RFC 9110
// 5.3: Link, WWW-Authenticate, Via, X-Forwarded-For are ordered lists).
// apart names the fields h keeps apart, which delFields leaves alone.
func delFields(h fieldSet, apart []string, del []string) {
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
	type field struct{ k, v []byte }
	var kept []field
	for k, v := range h.All() {
		if !hasFold(apart, k) && !hasFold(del, k) {
			kept = append(kept, field{bytes.Clone(k), bytes.Clone(v)})
		}
	}
	for _, name := range del {
		h.Del(name)
	}
	for i, f := range kept {
		if !slices.ContainsFunc(kept[:i], func(g field) bool { return bytes.EqualFold(g.k, f.k) }) {
			h.Del(string(f.k))
		}
	}
	for _, f := range kept {
		h.AddBytesKV(f.k, f.v)
	}
}

func hasFold(names []string, k []byte) bool {
	for _, n := range names {
		if bytes.EqualFold([]byte(n), k) {
			return true
		}
	}
	return false
}
