package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/kafkasink"
)

// kfakeHelperEnv makes TestKfakeHelperProcess run a cluster: the
// benchmark runs the broker in a process of its own, so that the CPU it
// measures is the producer's, not the broker's.
const kfakeHelperEnv = "POPLIMIT_KFAKE_HELPER"

// TestKfakeHelperProcess is not a test: run by startKfakeProcess, it
// serves a kfake cluster, prints "KFAKE addr" and stops when stdin closes.
func TestKfakeHelperProcess(t *testing.T) {
	if os.Getenv(kfakeHelperEnv) == "" {
		t.Skip("helper process of BenchmarkDecideWithEvents")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, eventsTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Println("KFAKE", c.ListenAddrs()[0])
	io.Copy(io.Discard, os.Stdin)
}

// startKfakeProcess runs TestKfakeHelperProcess in a child process and
// returns its broker address.
func startKfakeProcess(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKfakeHelperProcess$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), kfakeHelperEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "KFAKE "); ok {
			go io.Copy(io.Discard, stdout)
			return addr
		}
	}
	b.Fatal("the kfake helper process printed no address")
	return ""
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchKey numbers the API keys across runs: each key gets 10 requests
// in its minute, the 10th refused.
var benchKey atomic.Int64

// benchEventsPolicy admits 9 requests a minute per API key.
var benchEventsPolicy = strings.Replace(eventsPolicy, "quantity: 20", "quantity: 9", 1)

// BenchmarkDecideWithEvents measures the process CPU per decision (every
// goroutine: the events queue, the encoder and the producer included) of
// Limiter.Decide at 10% refusals, with no events, JSON lines to a
// discarded writer, and the Kafka producer (the broker in another
// process), interleaved: eventsBenchRounds rounds of each in turn.
func BenchmarkDecideWithEvents(b *testing.B) {
	addr := startKfakeProcess(b)
	for range eventsBenchRounds {
		for _, sink := range []string{"none", "file", "kafka"} {
			b.Run("sink="+sink, func(b *testing.B) { benchDecideEvents(b, sink, addr) })
		}
	}
}

// eventsBenchRounds is how many times each variant of the events
// benchmarks runs, interleaved with the others.
const eventsBenchRounds = 5

func benchDecideEvents(b *testing.B, sink, addr string) {
	var events *pop.Events
	var ks *kafkasink.Sink
	switch sink {
	case "file":
		events = pop.NewEvents(io.Discard, pop.EventsConfig{})
	case "kafka":
		var err error
		ks, err = kafkasink.New(kafkasink.Config{Brokers: []string{addr}, Topic: eventsTopic})
		if err != nil {
			b.Fatal(err)
		}
		events = pop.NewEventsTo(ks, pop.EventsConfig{})
	}
	l, err := pop.New(pop.Config{Events: events, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.LoadBytes("policy.yml", []byte(benchEventsPolicy)); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if events != nil {
			events.Run(ctx)
		}
	}()
	req, _ := http.NewRequest("GET", "http://edge/api/x", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	now := time.Now()
	var refused int
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	key := ""
	for i := range b.N {
		if i%10 == 0 {
			key = "key-" + strconv.FormatInt(benchKey.Add(1), 10)
			req.Header.Set("X-API-Key", key)
		}
		if !l.Decide(ctx, req, now).Allowed {
			refused++
		}
	}
	// The events still queued or buffered are part of the cost.
	for events != nil && events.Written()+events.Dropped() < uint64(refused) {
		time.Sleep(time.Millisecond)
	}
	for ks != nil && ks.Buffered() > 0 {
		time.Sleep(time.Millisecond)
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	cancel()
	<-done
	if ks != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		ks.Close(cctx)
		ccancel()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/decision")
	b.ReportMetric(float64(refused)/float64(b.N), "refused/decision")
}

// BenchmarkEdgeCPUWithKafkaEvents measures an edge worker's own CPU per
// decision (process_cpu_seconds_total) at 10% refusals, with no events
// and with --events kafka://… (the broker in this process), two edges
// loaded in turn, eventsBenchRounds rounds each, interleaved, the first
// alternating. Use
// -benchtime 20000x or more: the CPU counter ticks in 10 ms.
func BenchmarkEdgeCPUWithKafkaEvents(b *testing.B) {
	c := startKafka(b, 0)
	defer c.Close()
	dir := b.TempDir()
	policyPath := writeFile(b, dir+"/policy.yml", benchEventsPolicy)
	upstream := newUpstream(b)
	addrs := map[string]string{}
	metrics := map[string]string{}
	for _, sink := range []string{"none", "kafka"} {
		dest := ""
		if sink == "kafka" {
			dest = "kafka://" + c.ListenAddrs()[0] + "/" + eventsTopic
		}
		a, p := startEdgeEvents(b, "edge-"+sink, upstream, policyPath, dest)
		addrs[sink], metrics[sink] = a, p.metrics
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	for r := range eventsBenchRounds {
		order := []string{"none", "kafka"}
		if r%2 == 1 { // neither goes first every time
			order[0], order[1] = order[1], order[0]
		}
		for _, sink := range order {
			b.Run("sink="+sink, func(b *testing.B) {
				m := metrics[sink]
				cpu0 := scrape(b, m, "process_cpu_seconds_total")
				refused0 := scrape(b, m, "poplimit_decisions_total", `allowed="false"`)
				const clients = 8
				errs := make(chan error, clients)
				for w := range clients {
					go func() {
						var err error
						key := ""
						for i := w; i < b.N; i += clients {
							if (i/clients)%10 == 0 {
								key = "k" + strconv.FormatInt(benchKey.Add(1), 10)
							}
							if _, e := getAPI(hc, addrs[sink], key); e != nil && err == nil {
								err = e
							}
						}
						errs <- err
					}()
				}
				for range clients {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				refused := scrape(b, m, "poplimit_decisions_total", `allowed="false"`)
				if sink == "kafka" { // the events acknowledged are part of the cost
					for deadline := time.Now().Add(10 * time.Second); scrape(b, m, "poplimit_rejection_events_written_total") < refused && time.Now().Before(deadline); {
						time.Sleep(10 * time.Millisecond)
					}
				}
				cpu := scrape(b, m, "process_cpu_seconds_total") - cpu0
				b.ReportMetric(cpu*1e9/float64(b.N), "edge-cpu-ns/decision")
				b.ReportMetric((refused-refused0)/float64(b.N), "refused/decision")
			})
		}
	}
}
