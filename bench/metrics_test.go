package bench

import (
	"strings"
	"testing"
)

func TestParseMetricLine(t *testing.T) {
	cases := []struct {
		line  string
		ok    bool
		name  string
		value float64
		label string
	}{
		{`poplimit_store_errors_total 12`, true, "poplimit_store_errors_total", 12, ""},
		{`poplimit_fallback_decisions_total{policy="a,b",mode="open"} 3 1700000000`, true, "poplimit_fallback_decisions_total", 3, "open"},
		{`# HELP x y`, false, "", 0, ""},
		{`broken{a="b" 1`, false, "", 0, ""},
		{`x NaNx`, false, "", 0, ""},
	}
	for _, c := range cases {
		s, ok := parseMetricLine(c.line)
		if ok != c.ok || (ok && (s.Name != c.name || s.Value != c.value || s.Labels["mode"] != c.label)) {
			t.Errorf("%q: got %+v %v", c.line, s, ok)
		}
	}
	m := metricSet{{Name: "a", Labels: map[string]string{"mode": "open"}, Value: 2},
		{Name: "a", Labels: map[string]string{"mode": "closed"}, Value: 3}}
	if m.Sum("a", "", "") != 5 || m.Sum("a", "mode", "open") != 2 {
		t.Fatal("Sum")
	}
}

func FuzzParseMetricLine(f *testing.F) {
	f.Add(`poplimit_fallback_decisions_total{policy="a,b",mode="open"} 3`)
	f.Add(`x 1`)
	f.Fuzz(func(t *testing.T, line string) {
		s, ok := parseMetricLine(line)
		if ok && strings.ContainsAny(s.Name, "{ ") {
			t.Fatalf("name %q from %q", s.Name, line)
		}
	})
}

func TestStoreCommands(t *testing.T) {
	mcproxy := map[string]string{"cmd_get": "2", "cmd_incr": "5", "cmd_add": "1", "cmd_stats": "9", "cmd_version": "3", "curr_connections": "4"}
	if n := storeCommandsOf(mcproxy); n != 8 {
		t.Fatalf("mcproxy: %d", n)
	}
	memcached := map[string]string{"cmd_get": "2", "cmd_set": "1", "incr_hits": "4", "incr_misses": "1", "cmd_flush": "7"}
	if n := storeCommandsOf(memcached); n != 8 {
		t.Fatalf("memcached: %d", n)
	}
}

func TestParseSlabStats(t *testing.T) {
	reply := "STAT 5:chunk_size 240\r\nSTAT 5:used_chunks 10\r\nSTAT 2:chunk_size 96\r\nSTAT 2:used_chunks 3\r\nSTAT 2:mem_requested 200\r\nSTAT active_slabs 2\r\nSTAT total_malloced 2097152\r\nEND\r\n"
	got, err := parseSlabStats([]byte(reply))
	if err != nil {
		t.Fatal(err)
	}
	want := []slabClass{{ID: 2, ChunkSize: 96, UsedChunks: 3}, {ID: 5, ChunkSize: 240, UsedChunks: 10}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v", got)
	}
	if _, err := parseSlabStats([]byte("garbage here now\r\nEND\r\n")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func FuzzParseSlabStats(f *testing.F) {
	f.Add([]byte("STAT 5:chunk_size 240\r\nSTAT 5:used_chunks 10\r\nSTAT active_slabs 1\r\nEND\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		classes, err := parseSlabStats(b)
		if err != nil {
			return
		}
		for i := 1; i < len(classes); i++ {
			if classes[i].ID <= classes[i-1].ID {
				t.Fatalf("classes not sorted: %+v", classes)
			}
		}
	})
}
