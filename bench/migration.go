package bench

import (
	"fmt"
	"strconv"
	"testing"
)

// The helpers of the Twemproxy migration tests (bench and proxy): keys
// written through one proxy, read back through another over the same
// shards.

// MigrationKeys returns n keys: every third one hash-tagged like a limiter
// key ("rl:{user<i>}:w<j>"), the others plain.
func MigrationKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		if i%3 == 0 {
			keys[i] = fmt.Sprintf("rl:{user%d}:w%d", i/3, i%7)
		} else {
			keys[i] = "mig:" + strconv.Itoa(i)
		}
	}
	return keys
}

// FlushForTest empties the memcached (or proxy) at addr.
func FlushForTest(t testing.TB, addr string) {
	t.Helper()
	rw := DialForTest(t, addr)
	rw.WriteString("flush_all\r\n")
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	if line, err := rw.ReadString('\n'); err != nil || line != "OK\r\n" {
		t.Fatalf("flush_all %s: %q %v", addr, line, err)
	}
}

// SetValuesForTest sets keys[i] to "v<i>" through addr, 100 pipelined
// sets at a time.
func SetValuesForTest(t testing.TB, addr string, keys []string) {
	t.Helper()
	rw := DialForTest(t, addr)
	for lo := 0; lo < len(keys); lo += 100 {
		hi := min(lo+100, len(keys))
		for i := lo; i < hi; i++ {
			v := "v" + strconv.Itoa(i)
			fmt.Fprintf(rw, "set %s 0 0 %d\r\n%s\r\n", keys[i], len(v), v)
		}
		if err := rw.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if line, err := rw.ReadString('\n'); err != nil || line != "STORED\r\n" {
				t.Fatalf("set %q via %s: %q %v", keys[i], addr, line, err)
			}
		}
	}
}

// GetValuesForTest reads keys through addr in 100-key multi-gets and
// returns how many were found, and how many of those had a value other
// than the "v<i>" SetValuesForTest wrote.
func GetValuesForTest(t testing.TB, addr string, keys []string) (hits, wrong int) {
	t.Helper()
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[k] = i
	}
	err := MultiGet(DialForTest(t, addr), keys, 100, func(key string, data []byte) {
		hits++
		if i, ok := index[key]; !ok || string(data) != "v"+strconv.Itoa(i) {
			wrong++
		}
	})
	if err != nil {
		t.Fatalf("get via %s: %v", addr, err)
	}
	return hits, wrong
}
