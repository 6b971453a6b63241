// Package deploy holds what an operator installs beside the binary: the
// Prometheus alerting rules (prometheus/alerts.yml, with promtool unit
// tests in prometheus/alerts_test.yml), the Grafana dashboard
// (grafana/tally.json), the systemd unit (tally.service) and the OCI
// image's Containerfile (built by scripts/image). docs/running.md says
// how to use them.
//
// It has no code. Its tests hold the assets to the server they describe:
// the rules pass promtool's checks and their unit tests, every metric and
// label the dashboard and the rules name is one a running server (on the
// embedded engine and on Redis) exports, and the image builds, runs,
// answers, keeps its data across a restart and stops cleanly.
package deploy
