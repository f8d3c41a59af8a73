// Package monitoring tests what deploy/monitoring ships against what the
// library really exports.
//
// The integration test (recorded_integration_test.go) runs the example
// server (examples/ha_server.cpp, linking the shipped library) as three
// replicas per scenario on a real API server, behind a fault proxy: a
// quiet period, a crash, a release on SIGTERM, flapping, a slow API
// server, 429s, a frozen API server, a replica down and every replica
// down. It scrapes each replica's /metrics every second, turns the scrapes
// into `promtool test rules` input series, and asserts which alerts of
// k8s-lease-rules.yaml fire and which stay silent in each scenario; the
// dashboard's queries must parse, name only metrics and labels those
// scrapes contain, and return series.
//
// Time is scaled: the replicas run at client-go's timings divided by
// five (3 s / 2 s / 0.4 s for 15 s / 10 s / 2 s) and their scrapes, a
// second apart, are given to promtool five seconds apart. Every duration
// the rules hold (each `for`, each range) then means what it means at
// client-go's timings; counters keep their values; the renewal latency is
// compared with the timings the replicas export, so it needs no scaling.
//
// The unit tests (rules_test.go) check the rules file itself: the
// PrometheusRule holds the same groups, every alert has a summary, a
// description and a runbook entry that exists, and the hand-written cases
// of k8s-lease-rules.test.yaml (what no real run may produce, such as two
// leaders) pass under promtool.
package monitoring
