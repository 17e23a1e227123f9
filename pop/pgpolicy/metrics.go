package pgpolicy

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the source's Prometheus collectors. A nil *Metrics records
// nothing.
type Metrics struct {
	connectedG    prometheus.Gauge
	loads         *prometheus.CounterVec // kind, result
	skippedRows   *prometheus.CounterVec // table
	notifications *prometheus.CounterVec // result
	reconnects    prometheus.Counter
}

// NewMetrics registers the source's collectors in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		connectedG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "poplimit_pgpolicy_connected",
			Help: "1 while the PostgreSQL policy source is connected and listening, 0 while it serves its last snapshot."}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poplimit_pgpolicy_loads_total",
			Help: "Snapshots built by the PostgreSQL policy source, by kind (full, keys, cache) and result (ok, error)."}, []string{"kind", "result"}),
		skippedRows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poplimit_pgpolicy_rows_skipped_total",
			Help: "Rows left out of a snapshot because they do not validate, by table."}, []string{"table"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "poplimit_pgpolicy_notifications_total",
			Help: "NOTIFY payloads received, by result (ok, malformed: a full re-read follows)."}, []string{"result"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "poplimit_pgpolicy_reconnects_total",
			Help: "Sessions with PostgreSQL that ended in an error and were retried."}),
	}
	for _, c := range []prometheus.Collector{m.connectedG, m.loads, m.skippedRows, m.notifications, m.reconnects} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) connected(up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.connectedG.Set(v)
}

func (m *Metrics) load(kind string, err error) {
	if m == nil {
		return
	}
	r := "ok"
	if err != nil {
		r = "error"
	}
	m.loads.WithLabelValues(kind, r).Inc()
}

func (m *Metrics) skipped(table string) {
	if m != nil {
		m.skippedRows.WithLabelValues(table).Inc()
	}
}

func (m *Metrics) notification(result string) {
	if m != nil {
		m.notifications.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) reconnect() {
	if m != nil {
		m.reconnects.Inc()
	}
}

// SkippedRows is the skipped-row counter of table (for tests and tools).
func (m *Metrics) SkippedRows(table string) prometheus.Counter {
	return m.skippedRows.WithLabelValues(table)
}

// Loads is the load counter of kind and result.
func (m *Metrics) Loads(kind, result string) prometheus.Counter {
	return m.loads.WithLabelValues(kind, result)
}

// Notifications is the notification counter of result.
func (m *Metrics) Notifications(result string) prometheus.Counter {
	return m.notifications.WithLabelValues(result)
}
