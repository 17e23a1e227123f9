package kafkasink

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// metrics are the sink's counters; the label children used on the hot
// path are resolved once.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	produced  prometheus.Counter
	dropped   *prometheus.CounterVec
	dropFull  prometheus.Counter
	errors    *prometheus.CounterVec
	extDrop   prometheus.Counter // caller's, may be nil
	extOut    prometheus.Counter // caller's, may be nil
	producedN atomic.Uint64
	droppedN  atomic.Uint64
}

func newMetrics(reg prometheus.Registerer, cl *kgo.Client, extDrop, extOut prometheus.Counter) (*metrics, error) {
	m := &metrics{
		reg: reg,
		produced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poplimit_kafka_events_produced_total", Help: "Rejection events acknowledged by Kafka.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_kafka_events_dropped_total", Help: "Rejection events dropped before or after reaching the Kafka producer, by reason: buffer_full, too_large, closed, delivery.",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poplimit_kafka_delivery_errors_total", Help: "Rejection events Kafka failed to acknowledge, by reason (timeout, retries, closed, canceled, or the Kafka error code in lower case).",
		}, []string{"reason"}),
		extDrop: extDrop,
		extOut:  extOut,
	}
	m.dropFull = m.dropped.WithLabelValues(DropBufferFull)
	m.collectors = []prometheus.Collector{
		m.produced, m.dropped, m.errors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "poplimit_kafka_buffered_bytes", Help: "Key and value bytes buffered in the Kafka producer, not yet acknowledged.",
		}, func() float64 { return float64(cl.BufferedProduceBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "poplimit_kafka_buffered_records", Help: "Records buffered in the Kafka producer, not yet acknowledged.",
		}, func() float64 { return float64(cl.BufferedProduceRecords()) }),
	}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("kafkasink: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) drop(reason string) {
	m.droppedN.Add(1)
	if reason == DropBufferFull {
		m.dropFull.Inc()
	} else {
		m.dropped.WithLabelValues(reason).Inc()
	}
	if m.extDrop != nil {
		m.extDrop.Inc()
	}
}

func (m *metrics) delivered() {
	m.producedN.Add(1)
	m.produced.Inc()
	if m.extOut != nil {
		m.extOut.Inc()
	}
}

func (m *metrics) deliveryError(reason string) {
	m.errors.WithLabelValues(reason).Inc()
}
