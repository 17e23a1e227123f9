package proxy

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// randomMetaSteps builds a reproducible random meta session: n steps of a
// few pipelined requests over a handful of keys, plain and base64, with
// random flags (valid ones the memory backend supports, and now and then a
// bad one), mixed with text get, set, delete, incr and decr. Nothing in it
// depends on the clock: TTLs are 0 or far away and me is left out.
func randomMetaSteps(seed uint64, n int) []transcriptStep {
	rng := rand.New(rand.NewPCG(seed, 0x6d657461))
	plain := []string{"a", "bb", "{x}c", "n1", "n2"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	key := func() (string, bool) {
		k := pick(plain)
		if rng.IntN(4) == 0 {
			return base64.StdEncoding.EncodeToString([]byte(k)), true
		}
		return k, false
	}
	// flags picks some of opts, shuffled, and sometimes a bad one.
	flags := func(opts []string) string {
		var out []string
		for _, o := range opts {
			if rng.IntN(3) == 0 {
				out = append(out, o)
			}
		}
		// A returned CAS unique needs k: with several shards uniques are
		// compared by rank per key (see normaliseMetaCAS).
		hasC, hasK := false, false
		for _, o := range out {
			hasC = hasC || o == "c"
			hasK = hasK || o == "k"
		}
		if hasC && !hasK {
			out = append(out, "k")
		}
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		if rng.IntN(25) == 0 {
			out = append(out, pick([]string{"x", "v", "Nx", "Dz", "MZ", "O123456789012345678901234567890123"}))
		}
		return strings.Join(out, " ")
	}
	opaque := func() string { return fmt.Sprintf("O%d", rng.IntN(100)) }
	var steps []transcriptStep
	for s := 0; s < n; s++ {
		var b strings.Builder
		// memcached increments in place only when nothing else holds the
		// item: an earlier mg hit of the same pipeline still does until its
		// reply is written, and the increment then makes a new item
		// (exact length, no binary-key mark). The memory backend does not
		// model reply references, so ma does not follow mg on a key within
		// a step.
		gotten := map[string]bool{}
		for r := rng.IntN(6) + 1; r > 0; r-- {
			k, b64 := key()
			plainKey := k
			if b64 {
				d, _ := base64.StdEncoding.DecodeString(k)
				plainKey = string(d)
			}
			bflag := ""
			if b64 {
				bflag = " b"
			}
			op := rng.IntN(11)
			if (op >= 5 && op <= 7 || op == 10) && gotten[plainKey] {
				op = 8
			}
			if (op == 9 || op == 10) && b64 {
				op = 0 // text commands take plain keys only
			}
			switch op {
			case 0, 1:
				gotten[plainKey] = true
				fmt.Fprintf(&b, "mg %s%s %s\r\n", k, bflag, flags([]string{"v", "k", "f", "s", "c", "q", opaque(), "T0", "N0", "u", "t"}))
			case 2, 3:
				val := fmt.Sprint(rng.IntN(200))
				if rng.IntN(4) == 0 {
					val = "v" + val
				}
				fmt.Fprintf(&b, "ms %s %d%s %s\r\n%s\r\n", k, len(val), bflag,
					flags([]string{"q", "k", "c", opaque(), fmt.Sprintf("F%d", rng.IntN(9)), "T0", pick([]string{"MS", "ME", "MA", "MP", "MR"}), pick([]string{"C0", "C999999"})}), val)
			case 4:
				fmt.Fprintf(&b, "md %s%s %s\r\n", k, bflag, flags([]string{"q", "k", opaque(), "C999999"}))
			case 5, 6, 7:
				fmt.Fprintf(&b, "ma %s%s %s\r\n", k, bflag, flags([]string{"q", "k", "c", "t", "v", opaque(), "N0",
					fmt.Sprintf("J%d", rng.IntN(50)), fmt.Sprintf("D%d", rng.IntN(300)), pick([]string{"MI", "MD", "M+", "M-"}), "C999999", "T0"}))
			case 9: // the text protocol on the same items
				switch rng.IntN(3) {
				case 0:
					gotten[plainKey] = true
					fmt.Fprintf(&b, "get %s\r\n", k)
				case 1:
					val := fmt.Sprint(rng.IntN(1000))
					fmt.Fprintf(&b, "set %s %d 0 %d\r\n%s\r\n", k, rng.IntN(3), len(val), val)
				default:
					fmt.Fprintf(&b, "delete %s\r\n", k)
				}
			case 10:
				fmt.Fprintf(&b, "%s %s %d\r\n", pick([]string{"incr", "decr"}), k, rng.IntN(300))
			default:
				b.WriteString("mn\r\n")
			}
		}
		steps = append(steps, transcriptStep{line: s + 1, send: []byte(b.String())})
	}
	return steps
}

// TestMetaRandomDifferential runs random meta sessions on memcached and on
// mcproxy with embedded shards (one, and three with CAS uniques
// normalised), and compares every reply byte for byte, like the
// transcripts: the memory backend's fidelity on inputs nobody wrote by
// hand. Step numbers in failures are steps of the generated session.
//
// Real memcached shards behind mcproxy are not compared here: whether
// memcached increments in place depends on whether the reply of an earlier
// mg on the same key has been released yet, which depends on the traffic
// pattern a shard sees (an mg that is the last request before the
// connection idles keeps its reference until the next request arrives, so
// a later ma makes a new, unpadded item). The hand-written transcripts and
// TestMcproxyMeta cover the forwarding path.
func TestMetaRandomDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	mcs := fixture.Memcached(t, len(seeds))
	for i, seed := range seeds {
		steps := randomMetaSteps(seed, 60)
		mc := mcs[i]
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			diffTranscript(t, fmt.Sprintf("random meta seed %d", seed), mc.Addr, steps, nil)
		})
	}
}
