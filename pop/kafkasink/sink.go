// Package kafkasink produces rejection events to a Kafka topic without ever
// making the caller wait: Produce hands a record to an idempotent franz-go
// producer, or drops and counts it when the bounded buffer is full.
//
// Records are keyed by the caller's key (the identity digest) and
// partitioned by a hash of that key, so the events of one client stay in
// order on one partition. The package knows nothing of the event schema:
// the caller encodes, this package delivers.
package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Sink. Zero means default, except Brokers and Topic,
// which are required (see ParseURL).
type Config struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Topic receives every record. It must exist, unless the brokers
	// create topics on first use (auto.create.topics.enable).
	Topic string
	// MaxBufferedRecords bounds the records accepted but not yet
	// acknowledged; default 10000. Beyond it Produce drops.
	MaxBufferedRecords int
	// MaxBufferedBytes bounds the key and value bytes accepted but not yet
	// acknowledged; default 8 MiB. Beyond it Produce drops.
	MaxBufferedBytes int
	// Linger is how long a partition waits for more records before a
	// batch is sent; default 50ms. Negative means send at once.
	Linger time.Duration
	// Compression is the batch codec: "lz4" (default), "zstd", "snappy"
	// or "none".
	Compression string
	// DeliveryTimeout is how long a record may wait for an acknowledgement
	// before it is failed and counted as dropped (the idempotent producer
	// fails it only when that is safe); default 2m, at least 1s. Negative
	// means no limit: records wait in the buffer until the brokers come
	// back.
	DeliveryTimeout time.Duration
	// ClientID names the producer to the brokers; default "poplimit".
	ClientID string
	// Logger receives the producer's warnings and the first delivery
	// failure; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics; nil registers nothing. Close
	// unregisters them.
	Registerer prometheus.Registerer
	// Dropped, if set, is also incremented for every dropped record,
	// whatever the reason (e.g. the caller's own events-dropped counter).
	Dropped prometheus.Counter
	// Delivered, if set, is also incremented for every acknowledged record.
	Delivered prometheus.Counter

	// opts are extra client options, for tests.
	opts []kgo.Opt
}

func (c *Config) maxRecords() int {
	if c.MaxBufferedRecords > 0 {
		return c.MaxBufferedRecords
	}
	return 10000
}

func (c *Config) maxBytes() int {
	if c.MaxBufferedBytes > 0 {
		return c.MaxBufferedBytes
	}
	return 8 << 20
}

func (c *Config) linger() time.Duration {
	switch {
	case c.Linger < 0:
		return 0
	case c.Linger == 0:
		return 50 * time.Millisecond
	}
	return c.Linger
}

// codec resolves Compression; lz4 costs less CPU per event than zstd on
// small JSON batches (bench: BenchmarkCompression).
func (c *Config) codec() (kgo.CompressionCodec, error) {
	switch strings.ToLower(c.Compression) {
	case "", "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "none":
		return kgo.NoCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafkasink: unknown compression %q (want lz4, zstd, snappy or none)", c.Compression)
}

func (c *Config) deliveryTimeout() time.Duration {
	switch {
	case c.DeliveryTimeout < 0:
		return 0
	case c.DeliveryTimeout == 0:
		return 2 * time.Minute
	}
	return c.DeliveryTimeout
}

func (c *Config) clientID() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	return "poplimit"
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Drop reasons, the values of the dropped counter's reason label.
const (
	DropBufferFull = "buffer_full" // the buffer bound was reached
	DropTooLarge   = "too_large"   // one record exceeds MaxBufferedBytes
	DropClosed     = "closed"      // Produce after Close
	DropDelivery   = "delivery"    // accepted, then failed (see delivery errors)
)

// ErrClosed is returned by Close when called twice.
var ErrClosed = errors.New("kafkasink: closed")

// Sink produces records to one topic. Produce never blocks. Safe for
// concurrent use; Close once, after the last Produce.
type Sink struct {
	cl       *kgo.Client
	topic    string
	maxRecs  int64
	maxBytes int64
	recs     atomic.Int64 // accepted, not yet acknowledged or failed
	bytes    atomic.Int64 // their key and value bytes
	closed   atomic.Bool
	warned   atomic.Bool // the first delivery failure was logged
	purging  atomic.Bool // a purge of a recreated topic is running
	bg       sync.WaitGroup
	drained  chan struct{} // closed by finish when Close waits and none is left
	drainOne sync.Once
	log      *slog.Logger
	m        *metrics
	promise  func(*kgo.Record, error) // s.finish, bound once
}

// New returns a Sink producing to cfg.Topic. It does not connect: the
// client dials the brokers in the background and keeps retrying.
func New(cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, ErrNoBrokers
	}
	for i, b := range cfg.Brokers {
		if b == "" {
			return nil, fmt.Errorf("%w: broker %d", ErrEmptyBroker, i+1)
		}
	}
	if cfg.Topic == "" {
		return nil, ErrNoTopic
	}
	if err := checkTopic(cfg.Topic); err != nil {
		return nil, err
	}
	codec, err := cfg.codec()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		topic:    cfg.Topic,
		maxRecs:  int64(cfg.maxRecords()),
		maxBytes: int64(cfg.maxBytes()),
		log:      cfg.logger(),
		drained:  make(chan struct{}),
	}
	s.promise = s.finish
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ClientID(cfg.clientID()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(cfg.linger()),
		kgo.RecordDeliveryTimeout(cfg.deliveryTimeout()),
		// Produce admits against these bounds first; the client's own are
		// wider so that its ErrMaxBuffered (whose failure path may park the
		// caller) is never reached.
		kgo.MaxBufferedRecords(cfg.maxRecords() + 1),
		kgo.MaxBufferedBytes(2 * cfg.maxBytes()),
		kgo.AllowAutoTopicCreation(),
		kgo.WithLogger(kgoLogger{s.log}),
		// Idempotence (franz-go's default, acks=all) is left on: a retried
		// batch is written once and in order.
	}
	s.cl, err = kgo.NewClient(append(opts, cfg.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	s.m, err = newMetrics(cfg.Registerer, s.cl, cfg.Dropped, cfg.Delivered)
	if err != nil {
		s.cl.Close()
		return nil, err
	}
	return s, nil
}

// Produce queues one record with the given key and value, or drops and
// counts it; it never waits for the network or for buffer space. The sink
// keeps key and value until the record is acknowledged: the caller must
// not modify them afterwards.
func (s *Sink) Produce(key, value []byte) {
	if s.closed.Load() {
		s.m.drop(DropClosed)
		return
	}
	size := int64(len(key) + len(value))
	if size > s.maxBytes {
		s.m.drop(DropTooLarge)
		return
	}
	if s.recs.Load() >= s.maxRecs {
		s.m.drop(DropBufferFull)
		return
	}
	n, b := s.recs.Add(1), s.bytes.Add(size)
	if n > s.maxRecs || b > s.maxBytes {
		s.recs.Add(-1)
		s.bytes.Add(-size)
		s.m.drop(DropBufferFull)
		return
	}
	s.cl.TryProduce(context.Background(), &kgo.Record{Key: key, Value: value}, s.promise)
}

// finish is every record's promise; kgo calls promises serially.
func (s *Sink) finish(r *kgo.Record, err error) {
	s.bytes.Add(-int64(len(r.Key) + len(r.Value)))
	defer func() {
		if s.recs.Add(-1) == 0 && s.closed.Load() {
			s.drainOne.Do(func() { close(s.drained) })
		}
	}()
	switch {
	case err == nil:
		s.m.delivered()
		return
	case errors.Is(err, kgo.ErrMaxBuffered):
		s.m.drop(DropBufferFull)
		return
	case errors.Is(err, kerr.UnknownTopicID):
		s.purgeRecreatedTopic()
	}
	reason := errorReason(err)
	s.m.deliveryError(reason)
	s.m.drop(DropDelivery)
	if !s.warned.Swap(true) {
		s.log.Warn("rejection events: Kafka delivery failed; dropping and counting failed events", "topic", s.topic, "reason", reason, "err", err)
	}
}

// purgeRecreatedTopic makes the client forget a topic that was deleted and
// recreated (its ID changed), so that the next records adopt the new one;
// without it the client keeps failing them. It runs outside the promise,
// which must not block on the client, one at a time.
func (s *Sink) purgeRecreatedTopic() {
	if s.closed.Load() || !s.purging.CompareAndSwap(false, true) {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.purging.Store(false)
		s.log.Warn("rejection events: Kafka topic was recreated; producing to the new one", "topic", s.topic)
		s.cl.PurgeTopicsFromProducing(s.topic)
	}()
}

// Buffered is the number of records accepted and not yet acknowledged or
// failed; it never exceeds MaxBufferedRecords.
func (s *Sink) Buffered() int64 { return s.recs.Load() }

// Produced is the number of records acknowledged by the brokers so far.
func (s *Sink) Produced() uint64 { return s.m.producedN.Load() }

// Dropped is the number of records dropped so far, whatever the reason.
func (s *Sink) Dropped() uint64 { return s.m.droppedN.Load() }

// Close stops accepting records, waits until the buffered ones are
// acknowledged or ctx ends, then closes the client, failing (and counting
// as dropped) whatever is still buffered, and unregisters the metrics. The
// error is ctx's if the flush did not finish.
func (s *Sink) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	err := s.cl.Flush(ctx)
	s.cl.Close()
	// The client fails what it still buffers after Close returns.
	if s.recs.Load() > 0 {
		<-s.drained
	}
	s.bg.Wait()
	s.m.unregister()
	if err != nil {
		return fmt.Errorf("kafkasink: flush before close: %w", err)
	}
	return nil
}

// errorReason maps a delivery error to a bounded label value.
func errorReason(err error) string {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout):
		return "timeout"
	case errors.Is(err, kgo.ErrRecordRetries):
		return "retries"
	case errors.Is(err, kgo.ErrClientClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.As(err, &ke):
		return strings.ToLower(ke.Message)
	}
	return "other"
}

// kgoLogger passes the client's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	k.l.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}
