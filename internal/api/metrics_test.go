package api

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/metrics"
)

// TestMetricsLabelsBounded: requests with random methods and paths (on
// real routes and not) add no label value of their choosing: methods are
// standard or OTHER, routes are the table's or "unmatched".
func TestMetricsLabelsBounded(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	rng := rand.New(rand.NewPCG(11, 12))
	token := func() string { return fmt.Sprintf("Z%08x", rng.Uint32()) }
	var sent []string
	for i := range 60 {
		method, path := "GET", ""
		switch i % 4 {
		case 0: // a random method on a real route
			method = token()
			path = Prefix + "/servers"
		case 1: // a random path under the API
			path = Prefix + "/" + token() + "/" + token()
		case 2: // a random path outside it, with a random method
			method = token()
			path = "/" + token() + "?q=" + token()
		case 3: // a lower-case method on a real route
			method = "get"
			path = "/healthz"
		}
		sent = append(sent, method, path)
		h.do(method, path, h.token, nil)
	}
	st, _, body := h.do("GET", "/metrics", "", nil)
	if st != 200 {
		t.Fatalf("/metrics = %d", st)
	}
	routes := map[string]bool{unmatchedRoute: true, "GET /healthz": true, "GET /readyz": true, "GET /metrics": true}
	for _, rt := range h.srv.routes {
		routes[rt.method+" "+rt.path] = true
	}
	methods := map[string]bool{metrics.OtherMethod: true}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"} {
		methods[m] = true
	}
	label := regexp.MustCompile(`(route|method)="([^"]*)"`)
	series := 0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "kiln_http_") {
			continue
		}
		series++
		for _, m := range label.FindAllStringSubmatch(line, -1) {
			if m[1] == "route" && !routes[m[2]] || m[1] == "method" && !methods[m[2]] {
				t.Errorf("/metrics has %s label %q: %s", m[1], m[2], line)
			}
		}
	}
	if series == 0 {
		t.Fatal("/metrics has no kiln_http_ series")
	}
	tokens := regexp.MustCompile(`Z[0-9a-f]{8}`)
	for i := 0; i < len(sent); i += 2 {
		for _, tok := range tokens.FindAllString(sent[i]+" "+sent[i+1], -1) {
			if strings.Contains(string(body), tok) {
				t.Errorf("/metrics carries %q from a request (%s %s)", tok, sent[i], sent[i+1])
			}
		}
	}
	for _, want := range []string{
		`kiln_http_requests_total{method="OTHER",route="unmatched",status="405"} 30`, // cases 0 and 3
		`kiln_http_requests_total{method="GET",route="unmatched",status="404"} 15`,
		`kiln_http_requests_total{method="OTHER",route="unmatched",status="404"} 15`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
