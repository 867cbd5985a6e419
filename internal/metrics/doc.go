// Package metrics owns Kiln's Prometheus registry and the instruments that
// more than one package records into. It uses the official client library
// (github.com/prometheus/client_golang) with its own registry, never the
// global default one, so tests can build as many as they like.
//
// Counts that live in the database (servers by status, later runs by status
// and queue depth) are gathered at scrape time by collectors given a query
// function, so a scrape is always true and nothing is double-booked.
package metrics
