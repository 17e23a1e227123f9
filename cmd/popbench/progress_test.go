package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPlainProgress: off a terminal, progress is whole lines (no carriage
// return): the first update, one per interval of the clock, and the end.
func TestPlainProgress(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(0, 0)
	update, finish := plainProgress(&buf, "traffic", 5*time.Second, func() time.Time { return clock })
	for done := 0; done <= 100; done++ {
		update(done, 100)
		clock = clock.Add(200 * time.Millisecond) // 100 updates over 20 s: a line every 5 s
	}
	finish()
	out := buf.String()
	if strings.ContainsRune(out, '\r') {
		t.Fatalf("carriage return in plain progress: %q", out)
	}
	want := "traffic: 0/100 (0%)\ntraffic: 25/100 (25%)\ntraffic: 50/100 (50%)\ntraffic: 75/100 (75%)\ntraffic: 100/100 (100%)\n"
	if out != want {
		t.Errorf("plain progress:\n%s\nwant:\n%s", out, want)
	}

	buf.Reset()
	update, finish = plainProgress(&buf, "x", time.Second, func() time.Time { return clock })
	update(7, 7)
	finish()
	if buf.String() != "x: 7/7 (100%)\n" {
		t.Errorf("a final update already printed is not repeated: %q", buf.String())
	}
	buf.Reset()
	_, finish = plainProgress(&buf, "x", time.Second, time.Now)
	finish()
	if buf.Len() != 0 {
		t.Errorf("no update, no line: %q", buf.String())
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
}
