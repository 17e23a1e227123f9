package kafkasink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestEventsReadBackWithKcat checks that a stock Kafka consumer (Debian's
// kcat, librdkafka) reads every event as a JSON line keyed by its digest,
// for each codec the sink offers.
func TestEventsReadBackWithKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat); skipping the check with a non-Go consumer")
	}
	for _, codec := range []string{"lz4", "zstd", "snappy", "none"} {
		t.Run(codec, func(t *testing.T) {
			c := startCluster(t, 4, kfake.NumBrokers(1))
			defer c.Close()
			s, err := New(Config{Brokers: c.ListenAddrs(), Topic: testTopic, Compression: codec})
			if err != nil {
				t.Fatal(err)
			}
			const n, keys = 500, 11
			per := produceKeyed(t, s, n, keys)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil || s.Produced() != n {
				t.Fatalf("Close: %v; produced %d of %d", err, s.Produced(), n)
			}
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, kcat, "-C", "-b", c.ListenAddrs()[0], "-t", testTopic,
				"-e", "-q", "-o", "beginning", "-f", "%k %s\n")
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kcat: %v\n%s", err, stderr.String())
			}
			next := map[string]int{}
			lines := 0
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				lines++
				key, value, ok := strings.Cut(sc.Text(), " ")
				if !ok {
					t.Fatalf("line without key: %q", sc.Text())
				}
				var ev testEvent
				if err := json.Unmarshal([]byte(value), &ev); err != nil {
					t.Fatalf("line is not a JSON event: %v: %q", err, value)
				}
				if ev.KeyID != key || ev.Status != 429 || ev.Policy != "api-default" {
					t.Fatalf("event %+v read under key %q", ev, key)
				}
				// kcat interleaves partitions; within a key (one
				// partition) the order holds.
				if ev.Seq != next[key] {
					t.Fatalf("key %s: seq %d, want %d", key, ev.Seq, next[key])
				}
				next[key]++
			}
			if lines != n {
				t.Fatalf("kcat printed %d lines, want %d", lines, n)
			}
			for k, want := range per {
				if next[k] != want {
					t.Errorf("key %s: %d events, want %d", k, next[k], want)
				}
			}
		})
	}
}
