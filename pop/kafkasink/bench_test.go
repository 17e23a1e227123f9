package kafkasink

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkCompression compresses a batch of rejection events (about 300
// bytes of JSON each, distinct keys and sequence numbers) with franz-go's
// own compressor, as a produce request would. Metrics per event: CPU to
// compress (ns/event), to decompress (decomp-ns/event, the SIEM side),
// and bytes on the wire (wire-B/event).
func BenchmarkCompression(b *testing.B) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		typ   kgo.CompressionCodecType
	}{
		{"lz4", kgo.Lz4Compression(), kgo.CodecLz4},
		{"zstd", kgo.ZstdCompression(), kgo.CodecZstd},
		{"snappy", kgo.SnappyCompression(), kgo.CodecSnappy},
	}
	for _, events := range []int{10, 100, 1000} {
		var raw []byte
		for i := range events {
			k := keyOf(i % 97)
			raw = append(raw, k...)
			raw = append(raw, eventJSON(b, k, i)...)
		}
		for _, c := range codecs {
			b.Run(fmt.Sprintf("%s/events=%d", c.name, events), func(b *testing.B) {
				comp, err := kgo.DefaultCompressor(c.codec)
				if err != nil {
					b.Fatal(err)
				}
				dec := kgo.DefaultDecompressor()
				var dst bytes.Buffer
				var wire int
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					dst.Reset()
					out, used := comp.Compress(&dst, raw)
					if used != c.typ {
						b.Fatalf("compressed with %v", used)
					}
					wire = len(out)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
				b.ReportMetric(float64(wire)/float64(events), "wire-B/event")
				b.ReportMetric(float64(len(raw))/float64(events), "raw-B/event")
				dst.Reset()
				out, _ := comp.Compress(&dst, raw)
				out = bytes.Clone(out)
				const rounds = 200
				start := time.Now()
				for range rounds {
					if _, err := dec.Decompress(out, c.typ); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/rounds/float64(events), "decomp-ns/event")
			})
		}
	}
}

// BenchmarkProduce is the cost a decision pays per rejection event, one
// Produce to a live kfake broker that discards the records:
//   - accepted: every record fits the buffer (the timer stops while the
//     buffer drains), so this is the caller's side of a delivered event:
//     admission, partitioning by key, batching;
//   - full: the buffer is at its bound, the path taken when events outpace
//     Kafka or the brokers are down.
//
// ok/op is the share accepted.
func BenchmarkProduce(b *testing.B) {
	keys := make([][]byte, 256)
	for i := range keys {
		keys[i] = keyOf(i)
	}
	value := eventJSON(b, keys[0], 1)
	b.Run("accepted", func(b *testing.B) {
		s, _ := benchSink(b, Config{})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Produce(keys[i%len(keys)], value)
			if s.Buffered() >= 8192 {
				b.StopTimer()
				for s.Buffered() > 0 {
					time.Sleep(100 * time.Microsecond)
				}
				b.StartTimer()
			}
		}
		closeBench(b, s)
	})
	b.Run("full", func(b *testing.B) {
		s, c := benchSink(b, Config{MaxBufferedRecords: 64})
		c.Close() // brokers down: the buffer fills and stays full
		for i := range 64 {
			s.Produce(keys[i], value)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				s.Produce(keys[i%len(keys)], value)
				i++
			}
		})
		closeBench(b, s)
	})
}

func benchSink(b *testing.B, cfg Config) (*Sink, *kfake.Cluster) {
	c := startCluster(b, 6, kfake.NumBrokers(1), kfake.BlackholeProduce())
	b.Cleanup(c.Close)
	cfg.Brokers, cfg.Topic, cfg.Logger = c.ListenAddrs(), testTopic, quiet
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s, c
}

func closeBench(b *testing.B, s *Sink) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Close(ctx) // with the brokers down, what is buffered is dropped
	b.ReportMetric(float64(s.Produced())/float64(s.Produced()+s.Dropped()), "ok/op")
}
