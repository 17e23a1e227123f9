// Package deploy holds poplimit's deployment files, not a command: the
// systemd units (systemd/), the Prometheus alert rules and their unit
// tests (prometheus/), the Grafana dashboard (grafana/) and the metrics
// reference (METRICS.md). Its tests keep them true: the units pass
// systemd-analyze verify, the rules pass promtool check rules and test
// rules, and every metric the dashboard and the rules query, and every
// metric METRICS.md lists, is checked against the live /metrics of the
// binaries, started on loopback by the tests.
package deploy
