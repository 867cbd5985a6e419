package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func sqliteDB(t *testing.T) *store.DB { return storetest.SQLite(t) }

func TestListServersEmpty(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		status, hdr, body := h.do("GET", Prefix+"/servers", h.token, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if string(body) != "{\"servers\":[],\"count\":0}\n" {
			t.Errorf("body = %q, want an empty list and count 0", body)
		}
		if hdr.Get("RateLimit-Limit") != "1000" || hdr.Get("RateLimit-Remaining") != "999" || hdr.Get("RateLimit-Reset") != "1" {
			t.Errorf("RateLimit headers = %q/%q/%q, want 1000/999/1",
				hdr.Get("RateLimit-Limit"), hdr.Get("RateLimit-Remaining"), hdr.Get("RateLimit-Reset"))
		}
		if !validRequestID(hdr.Get("X-Request-Id")) {
			t.Errorf("X-Request-Id = %q, want a generated id", hdr.Get("X-Request-Id"))
		}
	})
}

// insertServer plants a server row the way the servers package will.
func insertServer(t *testing.T, db *store.DB, id, teamID, name string, port int, cfgID *string, createdAt int64) {
	t.Helper()
	_, err := db.Write().ExecContext(t.Context(), `
		INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, configuration_id, created_at, updated_at)
		VALUES ($1, $2, $3, 'paper', '1.21.4', 'offline', 'local', $4, 2048, 10240, 100, $5, $6, $6)`,
		id, teamID, name, port, cfgID, createdAt)
	if err != nil {
		t.Fatal(err)
	}
}

func TestListServersIsTeamScoped(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		ctx := t.Context()
		me, _ := h.auth.TeamByName(ctx, "default")
		other, err := h.auth.CreateTeam(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		cfg := "cfg_AAAAAAAAAAAAAAAAAAAA"
		insertServer(t, db, "6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c", me.ID, "lobby", 25565, nil, 1000)
		insertServer(t, db, "7a2d3b9f-8e4c-4d3b-8b62-3e4f5a6b7c8d", me.ID, "survival", 25566, &cfg, 2000)
		insertServer(t, db, "8b3e4c0a-9f5d-4e4c-9c73-4f5a6b7c8d9e", other.ID, "theirs", 25567, nil, 3000)

		status, _, body := h.do("GET", Prefix+"/servers", h.token, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		want := `{"servers":[` +
			`{"id":"7a2d3b9f-8e4c-4d3b-8b62-3e4f5a6b7c8d","name":"survival","status":"offline","address":"127.0.0.1:25566","resources":{"cpu":0,"memory_bytes":0,"disk_bytes":0,"uptime_ms":0},"software":"paper","node":"local","node_status":null,"configuration_id":"cfg_AAAAAAAAAAAAAAAAAAAA"},` +
			`{"id":"6f1c2a8e-7d3b-4c2a-9a51-2d3f4e5a6b7c","name":"lobby","status":"offline","address":"127.0.0.1:25565","resources":{"cpu":0,"memory_bytes":0,"disk_bytes":0,"uptime_ms":0},"software":"paper","node":"local","node_status":null,"configuration_id":null}` +
			`],"count":2}` + "\n"
		if string(body) != want {
			t.Errorf("body =\n%s\nwant\n%s", body, want)
		}

		tok, _, err := h.auth.CreateToken(ctx, "other", auth.KindAgent, "bot")
		if err != nil {
			t.Fatal(err)
		}
		_, _, body = h.do("GET", Prefix+"/servers", string(tok), nil)
		var got struct {
			Servers []struct{ Name string }
			Count   int
		}
		if err := json.Unmarshal(body, &got); err != nil || got.Count != 1 || got.Servers[0].Name != "theirs" {
			t.Errorf("other team sees %s, want only its own server", body)
		}
	})
}

func TestInvalidTokens(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db)
		revoked, info, err := h.auth.CreateToken(t.Context(), "default", auth.KindUser, "gone")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.auth.RevokeToken(t.Context(), info.ID); err != nil {
			t.Fatal(err)
		}
		good := h.token
		badSum := good[:len(good)-1] + map[bool]string{true: "1", false: "0"}[good[len(good)-1] == '0']
		cases := map[string]string{
			"missing":        "",
			"not bearer":     "Basic " + good,
			"bearer only":    "Bearer",
			"malformed":      "Bearer kiln_pat_short",
			"wrong prefix":   "Bearer ptlc_" + good[9:],
			"wrong checksum": "Bearer " + badSum,
			"unknown":        "Bearer " + string(mustGenerate(t)),
			"revoked":        "Bearer " + string(revoked),
		}
		for name, header := range cases {
			t.Run(name, func(t *testing.T) {
				var hdr []string
				if header != "" {
					hdr = []string{"Authorization", header}
				}
				status, rh, body := h.do("GET", Prefix+"/servers", "", nil, hdr...)
				wantError(t, status, body, 401, "INVALID_TOKEN", "token")
				if rh.Get("RateLimit-Limit") != "" {
					t.Errorf("an unauthenticated answer carries RateLimit-Limit %q", rh.Get("RateLimit-Limit"))
				}
			})
		}
		// The scheme is case-insensitive.
		if status, _, body := h.do("GET", Prefix+"/servers", "", nil, "Authorization", "bearer "+good); status != 200 {
			t.Errorf("lower-case bearer: %d %s", status, body)
		}
	})
}

// mustGenerate issues a well-formed token that the database has never seen,
// by creating one in a throwaway database.
func mustGenerate(t *testing.T) auth.Secret {
	t.Helper()
	db := storetest.SQLite(t)
	a, err := auth.NewService(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tok, _, err := a.Bootstrap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With the database gone, a malformed token is still a clean 401 (it never
// reaches the database) while a well-formed one is a 500 INTERNAL whose body
// reveals nothing of the failure.
func TestDatabaseErrorIsGenericInternal(t *testing.T) {
	db := sqliteDB(t)
	h := newHarness(t, db)
	db.Close()
	status, _, body := h.do("GET", Prefix+"/servers", "kiln_pat_nonsense", nil)
	wantError(t, status, body, 401, "INVALID_TOKEN", "token")
	status, _, body = h.do("GET", Prefix+"/servers", h.token, nil)
	wantError(t, status, body, 500, "INTERNAL", "internal error")
	for _, leak := range []string{"sql", "SQL", "database", "closed", "SELECT", "goroutine"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("500 body %s mentions %q", body, leak)
		}
	}
	if !strings.Contains(h.logs.String(), "request failed") {
		t.Errorf("the failure was not logged: %s", h.logs.String())
	}
	if strings.Contains(h.logs.String(), h.token) {
		t.Error("the log contains the token")
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	status, _, body := h.do("GET", Prefix+"/nope", h.token, nil)
	wantError(t, status, body, 404, "NOT_FOUND", "/api/client/v1/nope")
	status, _, body = h.do("GET", "/elsewhere", "", nil)
	wantError(t, status, body, 404, "NOT_FOUND", "no such endpoint")
	status, hdr, body := h.do("DELETE", Prefix+"/servers", h.token, nil)
	wantError(t, status, body, 405, "METHOD_NOT_ALLOWED", "DELETE")
	if hdr.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("Allow = %q, want %q", hdr.Get("Allow"), "GET, HEAD, POST")
	}
	// A path the mux would redirect to its clean form (an empty shell
	// variable, a "." or ".."): the JSON 404, never an HTML 307 to
	// another endpoint.
	for _, p := range []string{"/modrinth/projects//versions", "//servers", "/servers/./x", "/servers/x/../y"} {
		status, hdr, body := h.do("GET", Prefix+p, h.token, nil)
		wantError(t, status, body, 404, "NOT_FOUND", "empty")
		if hdr.Get("Location") != "" || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || hdr.Get("X-Request-Id") == "" {
			t.Errorf("%s: Location %q, Content-Type %q, request id %q", p, hdr.Get("Location"), hdr.Get("Content-Type"), hdr.Get("X-Request-Id"))
		}
	}
}

func TestRequestID(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	_, hdr, _ := h.do("GET", Prefix+"/servers", h.token, nil, "X-Request-Id", "abc-123.def")
	if got := hdr.Get("X-Request-Id"); got != "abc-123.def" {
		t.Errorf("valid incoming id: X-Request-Id = %q, want it echoed", got)
	}
	_, hdr, _ = h.do("GET", Prefix+"/servers", h.token, nil, "X-Request-Id", "bad id with spaces")
	if got := hdr.Get("X-Request-Id"); got == "bad id with spaces" || !validRequestID(got) {
		t.Errorf("invalid incoming id: X-Request-Id = %q, want a fresh one", got)
	}
	_, hdr, _ = h.do("GET", Prefix+"/nope", "", nil)
	if hdr.Get("X-Request-Id") == "" {
		t.Error("404 lacks X-Request-Id")
	}
	if !strings.Contains(h.logs.String(), "request_id=abc-123.def") {
		t.Errorf("access log lacks the request id:\n%s", h.logs.String())
	}
}

func TestRateLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, func(c *Config, _ *Deps) { c.RateLimit = 3 })
		for i := range 3 {
			status, hdr, body := h.do("GET", Prefix+"/servers", h.token, nil)
			if status != 200 {
				t.Fatalf("request %d: %d %s", i+1, status, body)
			}
			if got := hdr.Get("RateLimit-Remaining"); got != strconv.Itoa(2-i) {
				t.Errorf("request %d: RateLimit-Remaining = %s, want %d", i+1, got, 2-i)
			}
		}
		status, hdr, body := h.do("GET", Prefix+"/servers", h.token, nil)
		wantError(t, status, body, 429, "RATE_LIMITED", "rate limit")
		ra, err := strconv.Atoi(hdr.Get("Retry-After"))
		if err != nil || ra < 1 || ra > 20 {
			t.Errorf("Retry-After = %q, want 1..20 seconds", hdr.Get("Retry-After"))
		}
		if hdr.Get("RateLimit-Remaining") != "0" || hdr.Get("RateLimit-Limit") != "3" {
			t.Errorf("429 RateLimit headers = %s/%s, want 3/0", hdr.Get("RateLimit-Limit"), hdr.Get("RateLimit-Remaining"))
		}
		// The limit is per token, not per team.
		tok, _, err := h.auth.CreateToken(t.Context(), "default", auth.KindAgent, "second")
		if err != nil {
			t.Fatal(err)
		}
		if status, _, body := h.do("GET", Prefix+"/servers", string(tok), nil); status != 200 {
			t.Errorf("another token of the same team: %d %s, want 200", status, body)
		}
	})
}

func TestRouteClassRules(t *testing.T) {
	s := &Server{cfg: Config{RateLimit: 100}}
	for class, want := range map[limitClass]int{
		limitFilesSearch: 30, limitFilesWrite: 60, limitFilesDelete: 30, limitFilesPull: 10,
		limitCompress: 20, limitDecompress: 20, limitSnapshotCreate: 10, limitSnapshotDownload: 10,
	} {
		rules := s.rules(class)
		if len(rules) != 2 || rules[0].rule.Limit != want || rules[1].name != "global" || rules[1].rule.Limit != 100 {
			t.Errorf("rules(%s) = %+v, want %d then global 100", class, rules, want)
		}
	}
	s.cfg.RateLimit = 1_000_000
	if r := s.rules(limitFilesPull); r[0].rule.Limit != 100_000 {
		t.Errorf("scaled pull limit = %d, want 100000", r[0].rule.Limit)
	}
	s.cfg.RateLimit = 1
	if r := s.rules(limitFilesPull); r[0].rule.Limit != 1 {
		t.Errorf("scaled pull limit at 1/min = %d, want at least 1", r[0].rule.Limit)
	}
	if r := s.rules(limitNone); len(r) != 1 {
		t.Errorf("rules(none) = %+v, want only the global rule", r)
	}
}

// TestRefusedRequestsSpendNothing: a request a route's limit refuses
// does not count against the token's global limit (it did: 15 pulls, 5
// of them refused, spent 16 of the global budget with the next request
// instead of 11).
func TestRefusedRequestsSpendNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, func(c *Config, _ *Deps) { c.RateLimit = 100 })
		id, _ := h.fileServer(1024)
		_, hdr, _ := h.do("GET", Prefix+"/servers", h.token, nil)
		r0, _ := strconv.Atoi(hdr.Get("RateLimit-Remaining"))
		refused := 0
		for range 15 {
			status, _, _ := h.do("POST", Prefix+"/servers/"+id+"/files/pull", h.token, strings.NewReader(`{}`), "Content-Type", "application/json")
			if status == 429 {
				refused++
			}
		}
		if refused != 5 {
			t.Fatalf("%d of 15 pulls refused, want 5 (10 a minute)", refused)
		}
		// 11 spent (the budget refills meanwhile: at least); counting the
		// refused pulls, 16.
		status, hdr, body := h.do("GET", Prefix+"/servers", h.token, nil)
		if got, _ := strconv.Atoi(hdr.Get("RateLimit-Remaining")); status != 200 || got < r0-11 {
			t.Errorf("after 10 pulls and 5 refused: %d, RateLimit-Remaining %d; want at least %d (%s)", status, got, r0-11, body)
		}
	})
}

// TestUnauthenticatedAreLimited: an address whose requests keep carrying
// a bad token is refused (429) before its token is looked up, once it
// passed unauthFailures a minute; another address is not.
func TestUnauthenticatedAreLimited(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	bad := "Bearer " + string(mustGenerate(t))
	for i := range unauthFailures {
		status, _, body := h.do("GET", Prefix+"/servers", "", nil, "Authorization", bad)
		if status != 401 {
			t.Fatalf("bad token %d: %d %s, want 401", i+1, status, body)
		}
	}
	status, hdr, body := h.do("GET", Prefix+"/servers", "", nil, "Authorization", bad)
	wantError(t, status, body, 429, "RATE_LIMITED", "invalid token")
	if hdr.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	// The address is refused whatever it sends (its token is not looked
	// up); another address is not.
	if status, _, _ := h.do("GET", Prefix+"/servers", h.token, nil); status != 429 {
		t.Errorf("a good token from the same address: %d, want 429", status)
	}
	if !h.srv.failed.Spent("127.0.0.1", unauthRule()) || h.srv.failed.Spent("127.0.0.2", unauthRule()) {
		t.Error("the limit is not per address")
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	db := sqliteDB(t)
	h := newHarness(t, db)
	if status, _, body := h.do("GET", "/healthz", "", nil); status != 200 || string(body) != "{\"status\":\"ok\"}\n" {
		t.Errorf("/healthz = %d %s", status, body)
	}
	if status, _, body := h.do("GET", "/readyz", "", nil); status != 200 || string(body) != "{\"status\":\"ready\"}\n" {
		t.Errorf("/readyz = %d %s", status, body)
	}
	h.do("GET", Prefix+"/servers", h.token, nil)
	status, hdr, body := h.do("GET", "/metrics", "", nil)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics = %d %s", status, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`kiln_http_requests_total{method="GET",route="GET /servers",status="200"} 1`,
		`kiln_http_request_duration_seconds_count{method="GET",route="GET /servers"} 1`,
		`kiln_servers{status="running"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	db.Close()
	if status, _, body := h.do("GET", "/readyz", "", nil); status != 503 || !strings.Contains(string(body), "unavailable") {
		t.Errorf("/readyz with the database closed = %d %s, want 503", status, body)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	handler := h.srv.wrap(route{method: "GET", path: "/boom", public: true, h: func(http.ResponseWriter, *http.Request) error {
		panic("kaboom")
	}})
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest("GET", "/boom", nil))
	wantError(t, rec.Code, rec.Body.Bytes(), 500, "INTERNAL", "internal error")
	if strings.Contains(rec.Body.String(), "kaboom") {
		t.Error("the panic value leaked into the body")
	}
	if !strings.Contains(h.logs.String(), "kaboom") {
		t.Error("the panic was not logged")
	}
}

type decodeTarget struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Files []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
	Env map[string]string `json:"env"`
}

func TestDecodeJSON(t *testing.T) {
	type want struct {
		status int
		code   string
		issue  string // "path: message" of the first issue, or ""
	}
	cases := []struct {
		name, ctype, body string
		want              want
	}{
		{"ok", "application/json", `{"name":"a","count":2,"files":[{"from":"x","to":"y"}]}`, want{200, "", ""}},
		{"charset ok", "application/json; charset=utf-8", `{"name":"a"}`, want{200, "", ""}},
		{"wrong type", "text/plain", `{"name":"a"}`, want{415, "UNSUPPORTED_MEDIA_TYPE", ""}},
		{"no type", "", `{"name":"a"}`, want{415, "UNSUPPORTED_MEDIA_TYPE", ""}},
		{"empty", "application/json", ``, want{400, "VALIDATION_ERROR", ": request body is empty; a JSON object is required"}},
		{"malformed", "application/json", `{"name":`, want{400, "VALIDATION_ERROR", ": malformed JSON: unexpected end of input"}},
		{"syntax", "application/json", `{"name" "a"}`, want{400, "VALIDATION_ERROR", ""}},
		{"unknown top", "application/json", `{"name":"a","nmae":"b"}`, want{400, "VALIDATION_ERROR", "nmae: unknown field"}},
		{"unknown nested", "application/json", `{"files":[{"from":"x"},{"form":"y"}]}`, want{400, "VALIDATION_ERROR", "files[1].form: unknown field"}},
		{"wrong case", "application/json", `{"Name":"a"}`, want{400, "VALIDATION_ERROR", "Name: unknown field"}},
		{"type error", "application/json", `{"count":"two"}`, want{400, "VALIDATION_ERROR", "count: must be an integer, not string"}},
		{"nested type error", "application/json", `{"files":[{"from":1}]}`, want{400, "VALIDATION_ERROR", "files.from: must be a string, not number"}},
		{"not an object", "application/json", `[1,2]`, want{400, "VALIDATION_ERROR", ": the body must be a JSON object, not array"}},
		{"trailing", "application/json", `{"name":"a"} {"name":"b"}`, want{400, "VALIDATION_ERROR", ": unexpected data after the JSON value"}},
		{"too large", "application/json", `{"name":"` + strings.Repeat("x", maxJSONBody) + `"}`, want{413, "PAYLOAD_TOO_LARGE", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/x", bytes.NewBufferString(c.body))
			if c.ctype != "" {
				r.Header.Set("Content-Type", c.ctype)
			}
			rec := httptest.NewRecorder()
			var dst decodeTarget
			err := decodeJSON(rec, r, &dst)
			if c.want.status == 200 {
				if err != nil {
					t.Fatalf("decodeJSON: %v", err)
				}
				return
			}
			status, body := apiError(err)
			if status != c.want.status || body.Code != c.want.code {
				t.Fatalf("decodeJSON → %d %s (%v), want %d %s", status, body.Code, err, c.want.status, c.want.code)
			}
			if c.want.issue != "" {
				if len(body.Issues) == 0 {
					t.Fatalf("no issues; want %q", c.want.issue)
				}
				got := fmt.Sprintf("%s: %s", body.Issues[0].Path, body.Issues[0].Message)
				if got != c.want.issue {
					t.Errorf("first issue = %q, want %q", got, c.want.issue)
				}
			}
		})
	}
}
