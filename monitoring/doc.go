// Package monitoring holds jobonce's Prometheus alert rules
// (prometheus/jobonce.rules.yml, with their promtool unit tests) and its
// Grafana dashboard (grafana/jobonce.json), and the tests that prove them
// on a real Prometheus scraping a worker's OpenTelemetry metrics. It is a
// module of its own, so that the Prometheus exporter never enters the
// library's go.mod. docs/operations.md#alerting explains each alert.
package monitoring
