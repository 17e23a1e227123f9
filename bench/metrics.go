package bench

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// metricSet is a scrape of a Prometheus text endpoint: one sample per line.
type metricSet []metricSample

// MetricSample is one line of the text format.
type metricSample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ScrapeMetrics reads admin+"/metrics".
func ScrapeMetrics(admin string) (metricSet, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: %s/metrics: status %d", admin, resp.StatusCode)
	}
	var out metricSet
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if s, ok := parseMetricLine(sc.Text()); ok {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// ParseMetricLine parses `name{a="b",c="d"} value [timestamp]`; comments
// and malformed lines give ok = false.
func parseMetricLine(line string) (metricSample, bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return metricSample{}, false
	}
	s := metricSample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, false
	} else if line[i] == '{' {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return s, false
		}
		s.Name = line[:i]
		for _, kv := range splitLabels(line[i+1 : j]) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return s, false
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			s.Labels[strings.TrimSpace(k)] = v
		}
		rest = line[j+1:]
	} else {
		s.Name, rest = line[:i], line[i:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	return s, true
}

// splitLabels splits a="x",b="y,z" at commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQ, esc, from := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQ = !inQ
		case c == ',' && !inQ:
			out = append(out, s[from:i])
			from = i + 1
		}
	}
	if from < len(s) {
		out = append(out, s[from:])
	}
	return out
}

// Sum adds the values of the samples named name whose label key equals
// value (key "" matches all).
func (m metricSet) Sum(name, key, value string) float64 {
	var t float64
	for _, s := range m {
		if s.Name == name && (key == "" || s.Labels[key] == value) {
			t += s.Value
		}
	}
	return t
}

// SlabClass is one slab class of memcached's "stats slabs".
type slabClass struct {
	ID         int
	ChunkSize  int64
	UsedChunks int64
}

// SlabStats reads "stats slabs" from a memcached address.
func slabStats(addr string, timeout time.Duration) ([]slabClass, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("stats slabs\r\n")); err != nil {
		return nil, err
	}
	var buf []byte
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		buf = append(buf, line...)
		if strings.TrimRight(line, "\r\n") == "END" {
			return parseSlabStats(buf)
		}
	}
}

// ParseSlabStats parses the reply to "stats slabs" ("STAT 5:chunk_size 240"
// lines up to "END"); the classes come back sorted by id.
func parseSlabStats(reply []byte) ([]slabClass, error) {
	byID := map[int]*slabClass{}
	var ids []int
	for _, line := range strings.Split(string(reply), "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "END" {
			break
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			if line == "" {
				continue
			}
			return nil, fmt.Errorf("bench: stats slabs: bad line %q", line)
		}
		idStr, field, ok := strings.Cut(f[1], ":")
		if !ok {
			continue // active_slabs, total_malloced
		}
		id, err := strconv.Atoi(idStr)
		if err != nil {
			return nil, fmt.Errorf("bench: stats slabs: bad class %q", f[1])
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue // not every field is an integer
		}
		c := byID[id]
		if c == nil {
			c = &slabClass{ID: id}
			byID[id] = c
			ids = append(ids, id)
		}
		switch field {
		case "chunk_size":
			c.ChunkSize = v
		case "used_chunks":
			c.UsedChunks = v
		}
	}
	sort.Ints(ids)
	out := make([]slabClass, 0, len(ids))
	for _, id := range ids {
		out = append(out, *byID[id])
	}
	return out, nil
}
