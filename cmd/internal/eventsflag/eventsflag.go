// Package eventsflag is the command-line side of rejection events, shared
// by edge and rls: the --events flag (a file, stderr, or a Kafka topic)
// and the wiring of its value into a running pop.Events and its sink.
package eventsflag

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/kafkasink"
)

// Flags are --events, --events-pop, --events-worker and the Kafka
// producer's bounds --events-buffer-records and --events-buffer-bytes.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "events", Usage: "rejection events (schema v1, see the README): JSON lines appended to `FILE`, '-' for stderr, or kafka://BROKER[,BROKER...]/TOPIC (asynchronous, lz4, idempotent, keyed by the identity digest; never slows a decision: beyond its buffer events are dropped and counted); empty disables"},
		&cli.StringFlag{Name: "events-pop", EnvVars: []string{"POPLIMIT_POP"}, Usage: "the PoP's name in rejection events"},
		&cli.StringFlag{Name: "events-worker", Usage: "this process's name in rejection events (default HOSTNAME:PID)"},
		&cli.IntFlag{Name: "events-buffer-records", Value: 10000, Usage: "kafka: events buffered in the producer, not yet acknowledged; beyond, new events are dropped and counted (brokers down or slow)"},
		&cli.IntFlag{Name: "events-buffer-bytes", Value: 8 << 20, Usage: "kafka: bytes of events buffered in the producer, not yet acknowledged; beyond, new events are dropped and counted"},
	}
}

// closeTimeout bounds how long Start's wait gives the Kafka producer to
// deliver what it buffered at shutdown.
const closeTimeout = 5 * time.Second

// Start starts the rejection events of the flags of c until ctx ends: nil
// Events without --events. Their drops and deliveries are counted in
// metrics (which may be nil); the Kafka producer's own metrics go to
// reg. wait, called after ctx ends, waits for the queue to drain and
// closes the file or the producer.
func Start(ctx context.Context, c *cli.Context, metrics *pop.Metrics, reg prometheus.Registerer, logger *slog.Logger) (events *pop.Events, wait func(), err error) {
	dest := c.String("events")
	if dest == "" {
		return nil, func() {}, nil
	}
	worker := c.String("events-worker")
	if worker == "" {
		host, _ := os.Hostname()
		worker = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	cfg := pop.EventsConfig{PoP: c.String("events-pop"), Worker: worker, Metrics: metrics, Logger: logger}
	closeSink := func() {}
	switch {
	case strings.HasPrefix(dest, "kafka://"):
		sink, err := NewKafka(kafkasink.Config{MaxBufferedRecords: c.Int("events-buffer-records"), MaxBufferedBytes: c.Int("events-buffer-bytes"), Logger: logger, Registerer: reg}, dest, metrics)
		if err != nil {
			return nil, nil, fmt.Errorf("--events: %w", err)
		}
		events = pop.NewEventsTo(sink, cfg)
		closeSink = func() {
			cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			if err := sink.Close(cctx); err != nil {
				logger.Warn("events: kafka producer closed before delivering everything", "err", err)
			}
		}
	default:
		var w io.Writer = os.Stderr
		if dest != "-" {
			f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return nil, nil, err
			}
			w, closeSink = f, func() { f.Close() }
		}
		events = pop.NewEvents(w, cfg)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := events.Run(ctx); err != nil {
			logger.Warn("events: sink failed", "err", err)
		}
	}()
	return events, func() { <-done; closeSink() }, nil
}

// NewKafka returns the producer of cfg to a kafka://BROKER[,BROKER...]/TOPIC
// destination, counting its drops and deliveries in metrics (may be nil).
func NewKafka(cfg kafkasink.Config, dest string, metrics *pop.Metrics) (*kafkasink.Sink, error) {
	brokers, topic, err := kafkasink.ParseURL(dest)
	if err != nil {
		return nil, err
	}
	cfg.Brokers, cfg.Topic = brokers, topic
	if metrics != nil { // a nil Counter in an interface field is not "unset"
		cfg.Dropped, cfg.Delivered = metrics.EventsDropped(), metrics.EventsWritten()
	}
	return kafkasink.New(cfg)
}
