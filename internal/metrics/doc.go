// Package metrics owns Kiln's Prometheus registry and the instruments that
// more than one package records into. It uses the official client library
// (github.com/prometheus/client_golang) with its own registry, never the
// global default one, so tests can build as many as they like.
//
// Counts that live in the database (servers by status, later runs by status
// and queue depth) are gathered at scrape time by collectors given a query
// function, so a scrape is always true and nothing is double-booked.
//
// Label values are bounded: every series costs memory in Kiln and in the
// Prometheus that scrapes it, for as long as the process runs, so no
// request may create one of its choosing. The HTTP method is recorded
// as sent only for the standard methods, otherwise "OTHER"; the route is
// the caller's route pattern, "unmatched" for every request that matched
// none (never the path); the status is three digits or "other". The mod
// catalog instruments (Catalog) are labelled by catalog (curseforge,
// modrinth) and outcome, both from internal/modcatalog's fixed sets, never
// from a request's text.
package metrics
