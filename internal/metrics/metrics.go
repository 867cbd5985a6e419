package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is a registry and the HTTP instruments.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New builds a registry with the process and Go runtime collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kiln_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kiln_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest records one answered request. route must come from a
// fixed set (the caller's route table, one value for everything it did
// not match): it is a label as given. method is the client's and is
// bounded here: a method other than the nine of RFC 9110 and PATCH is
// recorded as "OTHER", so no request adds a label value of its choosing.
func (m *Metrics) ObserveRequest(route, method string, status int, d time.Duration) {
	method = MethodLabel(method)
	m.requests.WithLabelValues(route, method, statusText(status)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// OtherMethod is the method label of every request whose method is not a
// standard one.
const OtherMethod = "OTHER"

// MethodLabel is the label ObserveRequest records for method.
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodConnect:
		return http.MethodConnect
	case http.MethodTrace:
		return http.MethodTrace
	}
	return OtherMethod
}

func statusText(code int) string {
	if code >= 100 && code < 600 {
		return string([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10)})
	}
	return "other"
}

// CountFunc returns current counts by a label value (e.g. status).
type CountFunc func(ctx context.Context) (map[string]int, error)

// RegisterCounts exposes a gauge name{label=…} computed by fn at each scrape.
func (m *Metrics) RegisterCounts(name, help, label string, fn CountFunc, log *slog.Logger) {
	m.reg.MustRegister(&countCollector{
		desc: prometheus.NewDesc(name, help, []string{label}, nil),
		fn:   fn,
		log:  log,
	})
}

type countCollector struct {
	desc *prometheus.Desc
	fn   CountFunc
	log  *slog.Logger
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.fn(ctx)
	if err != nil {
		c.log.Warn("metrics collection failed", "metric", c.desc.String(), "err", err)
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for v, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), v)
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
