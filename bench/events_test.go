package bench

// Rejection events over the Kafka wire: edge and rls processes with
// --events kafka://… producing to a kfake cluster on loopback TCP, read
// back by a franz-go consumer and by kcat (librdkafka).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/pop"
)

const eventsTopic = "rejections"

// eventsPolicy gives every API key (taken as it comes) 20 requests a
// minute.
const eventsPolicy = `version: 1
api_key: {header: X-API-Key}
tiers:
  free:
    limits:
      - {name: minute, algorithm: fixed_window, quantity: 20, window: 1m}
policies:
  - name: api
    routes: ["GET /api/{x}"]
    identity: [api_key]
    tier: free
    default_tier: free
`

// eventsRLSConfig gives every user 20 requests a minute.
const eventsRLSConfig = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20}
`

// startKafka starts a kfake cluster of one broker on loopback (port 0: a
// free one) with eventsTopic seeded.
func startKafka(t testing.TB, port int) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, eventsTopic)}
	if port > 0 {
		opts = append(opts, kfake.Ports(port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventProc is an edge or rls process and its metrics endpoint.
type eventProc struct {
	name, metrics string
	p             *procs.Proc
}

// startEdgeEvents starts an edge worker with --events dest and extra args;
// it returns the proxied address.
func startEdgeEvents(t testing.TB, name, upstream, policyPath, dest string, extra ...string) (string, eventProc) {
	listen, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	p := fixture.Start(t, fixture.Binary(t, "edge"), append([]string{"--listen", listen, "--admin", admin, "--upstream", upstream,
		"--policy", policyPath, "--events", dest, "--events-pop", "test", "--events-worker", name}, extra...)...)
	waitHTTP(t, p, "http://"+admin+"/healthz")
	return listen, eventProc{name, "http://" + admin + "/metrics", p}
}

// waitHTTP waits until url answers 200.
func waitHTTP(t testing.TB, p *procs.Proc, url string) {
	t.Helper()
	err := p.WaitReady(context.Background(), 20*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scrape sums the samples of metric name whose labels contain every one of
// labels (`k="v"`).
func scrape(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %q", url, line)
		}
		sum += v
	}
	return sum
}

// getAPI sends one request with key to edge at addr and returns its status.
func getAPI(c *http.Client, addr, key string) (int, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/x", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func writeFile(t testing.TB, path, doc string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newUpstream(t testing.TB) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	return up.URL
}

// consumeAll reads eventsTopic from the start until want records came, then
// for one more second (extras would be duplicates); at most 20s.
func consumeAll(t *testing.T, addr string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(eventsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	deadline := time.Now().Add(20 * time.Second)
	var extra time.Time
	for time.Now().Before(deadline) && (extra.IsZero() || time.Now().Before(extra)) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) >= want && extra.IsZero() {
			extra = time.Now().Add(time.Second)
		}
	}
	return recs
}

// Edge workers and an rls with --events kafka://…, about 13% of requests
// refused: every refusal the processes count is on the topic exactly once,
// in order per identity, keyed by its digest, and kcat reads them all.
func TestRefusalsReachKafkaExactlyOnceInOrderPerIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs edge and rls processes")
	}
	c := startKafka(t, 0)
	defer c.Close()
	addr := c.ListenAddrs()[0]
	dest := "kafka://" + addr + "/" + eventsTopic
	dir := t.TempDir()
	policyPath := writeFile(t, filepath.Join(dir, "policy.yml"), eventsPolicy)
	upstream := newUpstream(t)
	var edges []string
	var ps []eventProc
	for i := range 4 {
		a, p := startEdgeEvents(t, fmt.Sprintf("edge-%d", i), upstream, policyPath, dest)
		edges, ps = append(edges, a), append(ps, p)
	}
	grpcAddr, httpAddr := fixture.FreeAddr(t), fixture.FreeAddr(t)
	writeFile(t, filepath.Join(dir, "rls", "d.yaml"), eventsRLSConfig)
	rp := fixture.Start(t, fixture.Binary(t, "rls"), "--grpc", grpcAddr, "--http", httpAddr, "--config-dir", filepath.Join(dir, "rls"),
		"--events", dest, "--events-pop", "test", "--events-worker", "rls-0")
	waitHTTP(t, rp, "http://"+httpAddr+"/healthcheck")
	ps = append(ps, eventProc{"rls-0", "http://" + httpAddr + "/metrics", rp})

	// 40 API keys and 20 rls users, 23 requests each, one after another
	// per identity, the identities in parallel: 3 of 23 refused, all in
	// one minute window.
	const perID, keys, users = 23, 40, 20
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlv3.NewRateLimitServiceClient(conn)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	var refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, keys+users)
	fixture.AwayFromBoundary(time.Minute, 30*time.Second)
	for k := range keys {
		wg.Go(func() {
			for range perID {
				code, err := getAPI(hc, edges[k%len(edges)], fmt.Sprintf("key-%d", k))
				if err != nil {
					errs <- err
					return
				}
				if code == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		})
	}
	for u := range users {
		wg.Go(func() {
			req := &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("u%d", u)}}}}}
			for range perID {
				resp, err := rl.ShouldRateLimit(context.Background(), req)
				if err != nil {
					errs <- err
					return
				}
				if resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every refusal counted by a process is acknowledged by Kafka.
	var total float64
	for _, p := range ps {
		n := scrape(t, p.metrics, "poplimit_decisions_total", `allowed="false"`)
		total += n
		waitUntil(t, p.name+": every refusal acknowledged", 15*time.Second, func() bool {
			return scrape(t, p.metrics, "poplimit_rejection_events_written_total") == n
		})
		if d := scrape(t, p.metrics, "poplimit_rejection_events_dropped_total"); d != 0 {
			t.Errorf("%s dropped %v events", p.name, d)
		}
	}
	all := float64(perID * (keys + users))
	if total != float64(refused.Load()) || total < 0.1*all || total > 0.2*all {
		t.Fatalf("processes counted %v refusals, clients saw %d, of %v requests: want the same, 10-20%%", total, refused.Load(), all)
	}

	recs := consumeAll(t, addr, int(total))
	if len(recs) != int(total) {
		t.Fatalf("topic holds %d events, want %v (one per refusal)", len(recs), total)
	}
	seen := map[string]bool{}   // worker/seq: each event once
	last := map[string]uint64{} // worker/identity: seq in partition order
	for _, r := range recs {
		var ev pop.Event
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatalf("record is not an event: %v: %s", err, r.Value)
		}
		if ev.V != pop.EventSchemaVersion || ev.Identity == "" || string(r.Key) != ev.Identity || ev.Decision != pop.EventRefused || ev.PoP != "test" {
			t.Fatalf("record key %q: %s", r.Key, r.Value)
		}
		if id := ev.Worker + "/" + strconv.FormatUint(ev.Seq, 10); seen[id] {
			t.Fatalf("event %s twice", id)
		} else {
			seen[id] = true
		}
		k := ev.Worker + "/" + ev.Identity
		if ev.Seq <= last[k] {
			t.Fatalf("%s: seq %d after %d: out of order", k, ev.Seq, last[k])
		}
		last[k] = ev.Seq
	}
	if len(last) != keys+users {
		t.Errorf("%d identities on the topic, want %d", len(last), keys+users)
	}
	t.Logf("%v requests, %v refused (%.1f%%): %d events on the topic, once each, in order per identity", all, total, 100*total/all, len(recs))
	readWithKcat(t, addr, int(total))
}

// readWithKcat reads the topic with kcat, when installed: want JSON
// events, each under its identity digest.
func readWithKcat(t *testing.T, addr string, want int) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Log("kcat is not installed (Debian package kcat): not read with a second Kafka implementation")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", eventsTopic, "-e", "-q", "-o", "beginning", "-f", "%k %s\n")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	lines := 0
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		lines++
		key, value, _ := strings.Cut(sc.Text(), " ")
		var ev pop.Event
		if err := json.Unmarshal([]byte(value), &ev); err != nil || ev.Identity != key {
			t.Fatalf("kcat line %q: %v", sc.Text(), err)
		}
	}
	if lines != want {
		t.Fatalf("kcat read %d events, want %d", lines, want)
	}
}

// waitUntil polls cond every 50ms for up to d.
func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outageEnv sets the outage of TestKafkaOutageNeverSlowsDecisions (a Go
// duration; default 3s), e.g. 10s for the full-length run.
const outageEnv = "POPLIMIT_KAFKA_OUTAGE"

// The cluster stopped under load (3 s, or $POPLIMIT_KAFKA_OUTAGE) and
// restarted on the same address: decisions go on at the same latency, the
// producer's buffer stays within its bound, the excess is dropped and
// counted, delivery resumes by itself, and the worker neither crashes nor
// leaks goroutines.
func TestKafkaOutageNeverSlowsDecisions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an edge process")
	}
	outage := 3 * time.Second
	if v := os.Getenv(outageEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", outageEnv, v, err)
		}
		outage = d
	}
	c := startKafka(t, 0)
	addr := c.ListenAddrs()[0]
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	dir := t.TempDir()
	const bound = 300
	edge, p := startEdgeEvents(t, "edge-0", newUpstream(t), writeFile(t, filepath.Join(dir, "policy.yml"), eventsPolicy),
		"kafka://"+addr+"/"+eventsTopic, "--events-buffer-records", strconv.Itoa(bound))

	// Load: 8 clients, each a fresh key every 23 requests (3 refused).
	var phase atomic.Int32 // 0 up, 1 down, 2 back
	var lat [3][]time.Duration
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := getAPI(hc, edge, fmt.Sprintf("w%d-%d", w, i/23)); err != nil {
					failures.Add(1)
					continue
				}
				d := time.Since(start)
				mu.Lock()
				ph := phase.Load()
				lat[ph] = append(lat[ph], d)
				mu.Unlock()
			}
		})
	}
	goroutines := func() float64 { return scrape(t, p.metrics, "go_goroutines") }
	time.Sleep(2 * time.Second)
	g0 := goroutines()
	c.Close()
	phase.Store(1)
	var maxBuffered float64
	for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		maxBuffered = max(maxBuffered, scrape(t, p.metrics, "poplimit_kafka_buffered_records"))
	}
	rss := scrape(t, p.metrics, "process_resident_memory_bytes")
	c2 := startKafka(t, port)
	defer c2.Close()
	phase.Store(2)
	written := scrape(t, p.metrics, "poplimit_rejection_events_written_total")
	waitUntil(t, "delivery resumes after the restart", 25*time.Second, func() bool {
		return scrape(t, p.metrics, "poplimit_rejection_events_written_total") > written+100
	})
	close(stop)
	wg.Wait()

	refused := scrape(t, p.metrics, "poplimit_decisions_total", `allowed="false"`)
	var accounted, dropped float64
	waitUntil(t, "every refusal delivered or dropped", 20*time.Second, func() bool {
		dropped = scrape(t, p.metrics, "poplimit_rejection_events_dropped_total")
		accounted = scrape(t, p.metrics, "poplimit_rejection_events_written_total") + dropped
		return accounted == refused
	})
	g1 := goroutines()
	p99 := func(ph int) time.Duration {
		s := slices.Clone(lat[ph])
		slices.Sort(s)
		if len(s) == 0 {
			return 0
		}
		return s[len(s)*99/100]
	}
	t.Logf("outage %v; decisions up/down/back: %d/%d/%d, p99 %v/%v/%v; refused %v: dropped %v (sink %v), producer buffer max %v records (bound %d), RSS %.1f MiB during the outage; goroutines %v before, %v after",
		outage, len(lat[0]), len(lat[1]), len(lat[2]), p99(0), p99(1), p99(2), refused, dropped,
		scrape(t, p.metrics, "poplimit_rejection_events_dropped_total", `reason="sink"`), maxBuffered, bound, rss/(1<<20), g0, g1)
	if failures.Load() != 0 {
		t.Errorf("%d requests failed", failures.Load())
	}
	if len(lat[1]) == 0 || p99(1) > 3*p99(0)+20*time.Millisecond {
		t.Errorf("during the outage: %d decisions, p99 %v (before %v)", len(lat[1]), p99(1), p99(0))
	}
	if maxBuffered > bound {
		t.Errorf("producer buffered %v records, bound %d", maxBuffered, bound)
	}
	if dropped == 0 {
		t.Error("no event dropped: the outage did not fill the buffer (raise the load or lower the bound)")
	}
	if g1 > g0+10 {
		t.Errorf("goroutines %v before the outage, %v after", g0, g1)
	}
	if p.p.Exited() {
		t.Error("edge exited")
	}
}

func TestDemoReportsRejectionEventsWrittenToKafka(t *testing.T) {
	env := newTestEnv(t, true)
	c := startKafka(t, 0)
	defer c.Close()
	dest := "kafka://" + c.ListenAddrs()[0] + "/" + eventsTopic
	res, err := runDemo(context.Background(), env, DemoConfig{Duration: 3 * time.Second, OutDir: t.TempDir(), Events: dest})
	if err != nil {
		t.Fatal(err)
	}
	if res.EventsWritten == 0 || res.EventsPerSecond <= 0 {
		t.Fatalf("no rejection events written: %d (%.1f/s), %d rejected", res.EventsWritten, res.EventsPerSecond, res.Outcomes["rejected"])
	}
	if res.EventsDropped != 0 {
		t.Errorf("%d rejection events dropped with the broker up", res.EventsDropped)
	}
	if !slices.ContainsFunc(res.Story(), func(s string) bool { return strings.Contains(s, dest) }) {
		t.Errorf("the story does not mention the events: %q", res.Story())
	}
	t.Logf("%d rejected, %d events written (%.0f/s), %d dropped", res.Outcomes["rejected"], res.EventsWritten, res.EventsPerSecond, res.EventsDropped)
}
