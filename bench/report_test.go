package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTableAndReport(t *testing.T) {
	tab := &Table{Title: "T", Header: []string{"name", "value"}}
	tab.Add("a", 1234.5)
	tab.Add("b", 0.000123)
	tab.Add("c", 1500*time.Microsecond)
	var buf bytes.Buffer
	tab.Text(&buf)
	for _, want := range []string{"T\n", "1234", "0.0001", "2ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, buf.String())
		}
	}
	md := tab.markdown()
	if !strings.HasPrefix(md, "| name | value |\n|---|---|\n| a | 1234 |") {
		t.Errorf("markdown:\n%s", md)
	}
	dir := t.TempDir()
	r := &Report{Title: "R"}
	r.Para("hello %d", 1)
	r.Table(tab)
	r.Image("chart", "c.png")
	path := filepath.Join(dir, "sub", "r.md")
	if err := r.Write(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{"# R\n", "hello 1", "**T**", "![chart](c.png)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestCharts draws every chart from a small replay, as PNG and SVG.
func TestCharts(t *testing.T) {
	tr, err := Generate(WorkloadConfig{Duration: 3 * time.Second, Legit: 3, Abusive: 1, Stuffers: 1})
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInproc(tr.Routes, InprocConfig{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Compress the trace: the chart does not care about real time.
	for i := range tr.Requests {
		tr.Requests[i].At /= 30
	}
	rep := ReplayTrace(t.Context(), tr, in, ReplayConfig{Concurrency: 4})
	if len(rep.Records) != len(tr.Requests) {
		t.Fatalf("%d records for %d requests", len(rep.Records), len(tr.Requests))
	}
	dir := t.TempDir()
	lat := rep.Latency
	files := []string{}
	for _, ext := range []string{"png", "svg"} {
		a := filepath.Join(dir, "admitted."+ext)
		c := filepath.Join(dir, "cdf."+ext)
		tl := filepath.Join(dir, "timeline."+ext)
		if err := chartAdmitted(a, admittedSeries(rep, chartClients(tr), time.Second), time.Second); err != nil {
			t.Fatal(err)
		}
		if err := chartCDF(c, "cdf", []string{"x"}, []*Latency{lat}); err != nil {
			t.Fatal(err)
		}
		spans := []Span{{Label: "fault", From: 100 * time.Millisecond, To: 200 * time.Millisecond}}
		if err := ChartTimeline(tl, "t", rep.Series(100*time.Millisecond, nil), 100*time.Millisecond, spans); err != nil {
			t.Fatal(err)
		}
		files = append(files, a, c, tl)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() < 500 {
			t.Errorf("%s: %v", f, err)
		}
	}
	png, _ := os.ReadFile(files[0])
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Error("png is not a PNG")
	}
	svg, _ := os.ReadFile(files[3])
	if !bytes.Contains(svg[:200], []byte("<svg")) && !bytes.Contains(svg[:200], []byte("<?xml")) {
		t.Error("svg is not an SVG")
	}
}
