// Command applytime times one apply of a deployment configuration through
// Kiln's API, for bench/deployments.sh: it POSTs /deployments/apply, then
// GETs the run every -poll until it has ended, over one keep-alive
// connection and in one process (a curl and a jq per poll from the shell
// cost more than a no-change run takes on a busy 2-core machine). It prints
// one line:
//
//	APPLY run=<id> status=<status> client_ms=<POST sent → end seen>
//	  post_ms=<the POST's round trip> polls=<n> queued_ms=<created_at →
//	  started_at> exec_ms=<started_at → completed_at> summary=<JSON>
//
// Exit status: 0 when the run ended (whatever its status), 1 when it had
// not after -timeout, 2 on an error.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

type run struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	CreatedAt   int64           `json:"created_at"`
	StartedAt   *int64          `json:"started_at"`
	CompletedAt *int64          `json:"completed_at"`
	Summary     json.RawMessage `json:"summary"`
}

func main() {
	api := flag.String("api", "", "base URL of the client API, e.g. http://127.0.0.1:8080/api/client/v1")
	tokenFile := flag.String("token-file", "", "file holding the bearer token")
	cfg := flag.String("config", "", "configuration id to apply")
	poll := flag.Duration("poll", 10*time.Millisecond, "interval between two GETs of the run")
	timeout := flag.Duration("timeout", 120*time.Second, "give up after this long")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil || *api == "" || *cfg == "" {
		fmt.Fprintln(os.Stderr, "applytime: -api, -token-file and -config are required", err)
		os.Exit(2)
	}
	token := strings.TrimSpace(string(tok))
	c := &http.Client{Timeout: 30 * time.Second}
	do := func(method, url string, body []byte) ([]byte, error) {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
		}
		return b, err
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "applytime:", err)
		os.Exit(2)
	}
	// One request first so that the timed POST reuses a warm connection.
	if _, err := do(http.MethodGet, *api+"/deployments/configurations/"+*cfg, nil); err != nil {
		fail(err)
	}

	body, _ := json.Marshal(map[string]string{"configuration_id": *cfg})
	t0 := time.Now()
	b, err := do(http.MethodPost, *api+"/deployments/apply", body)
	if err != nil {
		fail(err)
	}
	post := time.Since(t0)
	var applied struct{ Run run }
	if err := json.Unmarshal(b, &applied); err != nil || applied.Run.ID == "" {
		fail(fmt.Errorf("apply answered %s (%v)", b, err))
	}
	var r run
	polls := 0
	ended := false
	for {
		b, err := do(http.MethodGet, *api+"/deployments/runs/"+applied.Run.ID, nil)
		if err != nil {
			fail(err)
		}
		polls++
		var got struct{ Run run }
		if err := json.Unmarshal(b, &got); err != nil {
			fail(fmt.Errorf("run answered %.200s (%v)", b, err))
		}
		r = got.Run
		if r.Status == "succeeded" || r.Status == "failed" || r.Status == "canceled" {
			ended = true
			break
		}
		if time.Since(t0) > *timeout {
			break
		}
		time.Sleep(*poll)
	}
	client := time.Since(t0)
	ms := func(a int64, b *int64) string {
		if b == nil {
			return "-"
		}
		return fmt.Sprint(*b - a)
	}
	queued, exec := ms(r.CreatedAt, r.StartedAt), "-"
	if r.StartedAt != nil {
		exec = ms(*r.StartedAt, r.CompletedAt)
	}
	summary := string(r.Summary)
	if summary == "" || summary == "null" {
		summary = "{}"
	}
	fmt.Printf("APPLY run=%s status=%s client_ms=%.1f post_ms=%.1f polls=%d queued_ms=%s exec_ms=%s summary=%s\n",
		r.ID, r.Status, float64(client.Microseconds())/1000, float64(post.Microseconds())/1000, polls, queued, exec, summary)
	if !ended {
		os.Exit(1)
	}
}
