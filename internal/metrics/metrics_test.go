package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestMethodLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET", "GET"}, {"HEAD", "HEAD"}, {"POST", "POST"}, {"PUT", "PUT"}, {"PATCH", "PATCH"},
		{"DELETE", "DELETE"}, {"OPTIONS", "OPTIONS"}, {"CONNECT", "CONNECT"}, {"TRACE", "TRACE"},
		{"get", "OTHER"}, {"PROPFIND", "OTHER"}, {"", "OTHER"}, {"X-" + strings.Repeat("A", 1000), "OTHER"},
	} {
		if got := MethodLabel(tc.in); got != tc.want {
			t.Errorf("MethodLabel(%.20q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestObserveRequestBoundsMethods: many odd methods make one series.
func TestObserveRequestBoundsMethods(t *testing.T) {
	m := New()
	for i := range 100 {
		m.ObserveRequest("unmatched", "M"+strings.Repeat("X", i), 404, time.Millisecond)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	var series []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "kiln_http_requests_total{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	want := `kiln_http_requests_total{method="OTHER",route="unmatched",status="404"} 100`
	if len(series) != 1 || series[0] != want {
		t.Errorf("series after 100 odd methods = %q, want only %q", series, want)
	}
	if rec.Code != http.StatusOK {
		t.Errorf("scrape status %d", rec.Code)
	}
}
