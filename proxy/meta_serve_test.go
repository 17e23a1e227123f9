package proxy

import (
	"bufio"
	"fmt"
	"net"
	"testing"
)

// BenchmarkMetaIncrPipeline: increment-or-create in one round trip (ma N J
// v) through the proxy with embedded shards, 64 requests per write, the
// rate limiter's hot operation in meta form. The per-request figures
// include the client side of the loopback connection.
func BenchmarkMetaIncrPipeline(b *testing.B) {
	for _, quiet := range []bool{false, true} {
		name, flags := "loud", " N60 J0 v"
		if quiet {
			name, flags = "quiet", " N60 J0 q"
		}
		b.Run(name, func(b *testing.B) {
			addr, _ := serveEmbeddedForTest(b, 3)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var batch []byte
			for i := 0; i < 64; i++ {
				batch = fmt.Appendf(batch, "ma rl:{u%d}:w%s\r\n", i%8, flags)
			}
			batch = append(batch, "mn\r\n"...)
			br := bufio.NewReaderSize(c, 64<<10)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += 64 {
				if _, err := c.Write(batch); err != nil {
					b.Fatal(err)
				}
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if string(line) == "MN\r\n" {
						break
					}
				}
			}
		})
	}
}
