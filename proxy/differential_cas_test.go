package proxy

// CAS normalisation for the differential test: with several shards each
// counts its own CAS uniques, so uniques are compared by rank per key.

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// normaliseCAS rewrites the unique of every "VALUE key flags bytes cas"
// line as "<cas key#n>", n being the unique's rank among the distinct
// uniques of that key so far, across all the steps' replies.
func normaliseCAS(replies [][]byte) [][]byte {
	ranks := map[string]map[string]int{}
	out := make([][]byte, len(replies))
	for i, r := range replies {
		var b []byte
		for len(r) > 0 {
			nl := bytes.IndexByte(r, '\n')
			if nl < 0 {
				b = append(b, r...)
				break
			}
			line := r[:nl+1]
			r = r[nl+1:]
			f := strings.Fields(string(line))
			if len(f) > 0 && metaStatus[f[0]] {
				b = append(b, normaliseMetaCAS(f, ranks)...)
				if f[0] == "VA" && len(f) > 1 {
					if n, err := strconv.Atoi(f[1]); err == nil && n+2 <= len(r) {
						b = append(b, r[:n+2]...)
						r = r[n+2:]
					}
				}
				continue
			}
			if len(f) != 5 || f[0] != "VALUE" {
				b = append(b, line...)
				continue
			}
			if ranks[f[1]] == nil {
				ranks[f[1]] = map[string]int{}
			}
			rank, ok := ranks[f[1]][f[4]]
			if !ok {
				rank = len(ranks[f[1]]) + 1
				ranks[f[1]][f[4]] = rank
			}
			b = fmt.Appendf(b, "VALUE %s %s %s <cas %s#%d>\r\n", f[1], f[2], f[3], f[1], rank)
			if n, err := strconv.Atoi(f[3]); err == nil && n+2 <= len(r) {
				b = append(b, r[:n+2]...)
				r = r[n+2:]
			}
		}
		out[i] = b
	}
	return out
}

// metaStatus holds the status codes of meta replies whose flags may carry
// a CAS unique ("c<unique>").
var metaStatus = map[string]bool{"HD": true, "VA": true, "EN": true, "NS": true, "EX": true, "NF": true}

// normaliseMetaCAS rewrites a meta reply line's "c<unique>" flag (other
// than c0) as "<c key#n>", ranked like normaliseCAS's VALUE uniques; key is
// the line's k flag, or "-" without one.
func normaliseMetaCAS(f []string, ranks map[string]map[string]int) []byte {
	key := "-"
	for _, t := range f[1:] {
		if strings.HasPrefix(t, "k") {
			key = t[1:]
		}
	}
	var b []byte
	for i, t := range f {
		if i > 0 {
			b = append(b, ' ')
		}
		if i == 0 || len(t) < 2 || t[0] != 'c' || t == "c0" {
			b = append(b, t...)
			continue
		}
		if _, err := strconv.ParseUint(t[1:], 10, 64); err != nil {
			b = append(b, t...)
			continue
		}
		if ranks[key] == nil {
			ranks[key] = map[string]int{}
		}
		rank, ok := ranks[key][t[1:]]
		if !ok {
			rank = len(ranks[key]) + 1
			ranks[key][t[1:]] = rank
		}
		b = fmt.Appendf(b, "<c %s#%d>", key, rank)
	}
	return append(b, "\r\n"...)
}

func TestNormaliseCAS(t *testing.T) {
	in := [][]byte{
		[]byte("VALUE a 0 1 7\r\nx\r\nVALUE b 0 13 7\r\nVALUE a 0 1 9\r\nEND\r\n"),
		[]byte("STORED\r\nVALUE a 1 2 9\r\nyy\r\nVALUE a 1 2\r\nyy\r\nEND\r\n"),
	}
	want := []string{
		"VALUE a 0 1 <cas a#1>\r\nx\r\nVALUE b 0 13 <cas b#1>\r\nVALUE a 0 1 9\r\nEND\r\n",
		"STORED\r\nVALUE a 1 2 <cas a#2>\r\nyy\r\nVALUE a 1 2\r\nyy\r\nEND\r\n",
	}
	got := normaliseCAS(in)
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("reply %d: got %q, want %q", i, got[i], want[i])
		}
	}
}
