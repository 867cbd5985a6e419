package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Catalog records the mod catalogs' upstream requests and cache lookups
// (internal/modcatalog). Build it once per registry with Metrics.Catalog.
type Catalog struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	cache    *prometheus.CounterVec
}

// Catalog registers the catalog instruments in m's registry and returns
// them; call it once per Metrics (a second call panics, as registering a
// metric twice does).
func (m *Metrics) Catalog() *Catalog {
	c := &Catalog{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kiln_catalog_upstream_requests_total",
			Help: "HTTP requests sent to a mod catalog (curseforge, modrinth), retries included, by outcome.",
		}, []string{"catalog", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kiln_catalog_upstream_request_duration_seconds",
			Help:    "Time of one HTTP request to a mod catalog, sent to body read, by catalog.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"catalog"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kiln_catalog_cache_lookups_total",
			Help: "Catalog answers looked up in Kiln's in-memory cache, by catalog and result (hit, miss).",
		}, []string{"catalog", "result"}),
	}
	m.reg.MustRegister(c.requests, c.duration, c.cache)
	return c
}

// ObserveCatalogRequest records one upstream request. catalog and outcome
// must come from the caller's fixed sets (modcatalog's catalog names and
// outcomes): they are labels as given.
func (c *Catalog) ObserveCatalogRequest(catalog, outcome string, d time.Duration) {
	c.requests.WithLabelValues(catalog, outcome).Inc()
	c.duration.WithLabelValues(catalog).Observe(d.Seconds())
}

// ObserveCatalogCache records one cache lookup, a hit or a miss.
func (c *Catalog) ObserveCatalogCache(catalog string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	c.cache.WithLabelValues(catalog, result).Inc()
}
