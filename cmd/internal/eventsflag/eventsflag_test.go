package eventsflag

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/kafkasink"
)

// start runs Start on args through a cli.App, as edge and rls do, with
// ctx as the process's life.
func start(t *testing.T, ctx context.Context, m *pop.Metrics, args ...string) (events *pop.Events, wait func(), err error) {
	t.Helper()
	app := &cli.App{Name: "t", Flags: Flags(), Action: func(c *cli.Context) error {
		events, wait, err = Start(ctx, c, m, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		return nil
	}}
	if rerr := app.Run(append([]string{"t"}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return events, wait, err
}

func TestStartBuildsTheSinkOfTheFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if e, wait, err := start(t, ctx, nil); e != nil || err != nil {
		t.Errorf("without --events: %v %v, want nil Events", e, err)
	} else {
		wait()
	}
	for _, bad := range []string{"kafka://", "kafka://b:9092/", "kafka://b:9092/bad topic"} {
		if _, _, err := start(t, ctx, nil, "--events", bad); !errors.Is(err, kafkasink.ErrNoBrokers) && !errors.Is(err, kafkasink.ErrNoTopic) && !errors.Is(err, kafkasink.ErrBadTopic) || !strings.Contains(err.Error(), "--events") {
			t.Errorf("--events %s: %v, want a kafkasink URL error naming the flag", bad, err)
		}
	}
	path := filepath.Join(t.TempDir(), "ev.jsonl")
	fctx, fcancel := context.WithCancel(ctx)
	e, wait, err := start(t, fctx, nil, "--events", path, "--events-pop", "fra1", "--events-worker", "w1")
	if err != nil {
		t.Fatal(err)
	}
	e.Emit(pop.Event{Policy: "p", KeyID: "k1"})
	fcancel()
	wait()
	b, _ := os.ReadFile(path)
	var ev pop.Event
	if err := json.Unmarshal(b, &ev); err != nil || ev.PoP != "fra1" || ev.Worker != "w1" || ev.Identity != "k1" || ev.V != 1 {
		t.Errorf("file event %q (%v), want v1 from fra1/w1 with identity k1", b, err)
	}
}

// With the brokers gone for good, Start's wait still returns (within the
// close timeout), the events buffered are counted as dropped, and no
// goroutine is left behind.
func TestKafkaEventsStopWithBrokersDownWithoutLeaking(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "rejections"))
	if err != nil {
		t.Fatal(err)
	}
	addr := c.ListenAddrs()[0]
	m, err := pop.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e, wait, err := start(t, ctx, m, "--events", "kafka://"+addr+"/rejections", "--events-buffer-records", "50")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		e.Emit(pop.Event{Policy: "p", KeyID: "k" + string(rune('a'+i%3))})
	}
	delivered := m.EventsWritten()
	for end := time.Now().Add(10 * time.Second); testutil.ToFloat64(delivered) < 20 && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if got := testutil.ToFloat64(delivered); got != 20 {
		t.Fatalf("%v of 20 events acknowledged", got)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("rejections"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for end := time.Now().Add(10 * time.Second); n < 20 && time.Now().Before(end); {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			var ev pop.Event
			if json.Unmarshal(r.Value, &ev) != nil || string(r.Key) != ev.Identity || ev.IdentityKind != pop.IdentityAPIKey {
				t.Errorf("record %q: %s", r.Key, r.Value)
			}
			n++
		})
		pcancel()
	}
	cl.Close()
	if n != 20 {
		t.Fatalf("consumed %d of 20", n)
	}
	c.Close()
	for range 100 { // the bound is 50: the rest is dropped at once
		e.Emit(pop.Event{Policy: "p", KeyID: "k"})
	}
	cancel()
	start := time.Now()
	wait()
	if d := time.Since(start); d > closeTimeout+2*time.Second {
		t.Errorf("wait took %v with the brokers down", d)
	}
	if got := testutil.ToFloat64(m.EventsDropped()); got != 100 {
		t.Errorf("dropped{reason=sink} = %v, want the 100 events emitted after the brokers left", got)
	}
}
