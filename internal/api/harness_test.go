package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/metrics"
	"github.com/kilnhq/kiln/internal/modcatalog"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/ratelimit"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/sftp"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/store"
)

// Every response any test in this package receives through a harness client
// is validated against our OpenAPI document, and against the seed's when the
// operation is one of the seed's. exercised records which operations were
// driven, so TestMain can insist that every route was.
var (
	validators struct {
		once       sync.Once
		ours, seed validator.Validator
		seedOps    map[string]bool // "GET /servers"
		err        error
	}
	exercised sync.Map // operation id → true
)

func loadValidators(t testing.TB) (ours, seed validator.Validator, seedOps map[string]bool) {
	t.Helper()
	validators.once.Do(func() {
		mk := func(data []byte) (validator.Validator, error) {
			doc, err := libopenapi.NewDocument(data)
			if err != nil {
				return nil, err
			}
			v, errs := validator.NewValidator(doc)
			if len(errs) > 0 {
				return nil, fmt.Errorf("build validator: %v", errs)
			}
			return v, nil
		}
		ourDoc, err := openAPIJSON()
		if err != nil {
			validators.err = err
			return
		}
		if validators.ours, err = mk(ourDoc); err != nil {
			validators.err = err
			return
		}
		seedDoc, err := os.ReadFile(seedPath)
		if err != nil {
			validators.err = err
			return
		}
		if validators.seed, err = mk(seedDoc); err != nil {
			validators.err = err
			return
		}
		validators.seedOps = map[string]bool{}
		for _, op := range operations(mustJSON(seedDoc)) {
			validators.seedOps[op.method+" "+op.path] = true
		}
	})
	if validators.err != nil {
		t.Fatalf("load OpenAPI validators: %v", validators.err)
	}
	return validators.ours, validators.seed, validators.seedOps
}

// seedPath is the customer's contract. The copy in testdata lets the suite
// run from a clone without shared/; TestSeedCopyIsCurrent keeps it equal to
// shared/spec/seed-openapi.json whenever that is beside the repository.
const (
	seedPath   = "testdata/seed-openapi.json"
	sharedSeed = "../../../shared/spec/seed-openapi.json"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		// A full run must have driven every route of the table.
		s := &Server{}
		var missing []string
		for _, rt := range s.table() {
			if _, ok := exercised.Load(rt.op); !ok {
				missing = append(missing, rt.method+" "+rt.path+" ("+rt.op+")")
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			fmt.Fprintf(os.Stderr, "FAIL: routes no test drove (so no response was validated): %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

type harness struct {
	t      *testing.T
	srv    *Server
	url    string
	db     *store.DB
	auth   *auth.Service
	token  string // bootstrap token of team "default"
	client *http.Client
	logs   *syncBuffer // what the API and the services given its logger wrote
	// dataDir holds the service's server roots (servers/<id>) and cache.
	dataDir string
	// blobDir is the snapshots' file blob store.
	blobDir string
	// ports are the node's game ports.
	ports node.PortRange
}

type harnessOpt func(*Config, *Deps)

func newHarness(t *testing.T, db *store.DB, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessOn(t, db, serverstest.Options{}, opts...)
}

// newHarnessOn is newHarness with the servers service of so.
func newHarnessOn(t *testing.T, db *store.DB, so serverstest.Options, opts ...harnessOpt) *harness {
	t.Helper()
	ctx := t.Context()
	a, err := auth.NewService(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	tok, _, err := a.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(WithRequestID(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	var limiter ratelimit.Limiter = ratelimit.NewMemory(time.Now)
	if db.Dialect() == store.Postgres {
		limiter = ratelimit.NewPostgres(db.Write())
	}
	cfg := Config{RateLimit: 1000}
	env := serverstest.New(t, db, so)
	// Remote downloads may reach 127.0.0.1 only (the tests' upstreams), as
	// with --pull-allow-cidr 127.0.0.1/32; test names resolve locally.
	allow, _ := netguard.ParseAllowList([]string{"127.0.0.1/32"})
	// Snapshots on a file blob store, as kiln serve's default; their
	// delete hook first, as kiln serve's.
	blobDir := t.TempDir()
	blobs, err := blob.Open(ctx, "file://"+blobDir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := snapshot.New(db, blobs, env.Service, env.Catalog, snapshot.Options{Owner: "inst_api"}, log)
	t.Cleanup(snaps.Close)
	env.Service.OnDelete(snaps.ServerDeleting)
	env.Service.OnDeleteEnded(snaps.DeleteEnded)
	pulls := pull.NewManager(db, env.Service, netguard.NewPolicy(allow, testResolver{}),
		pull.Options{IdleTimeout: 5 * time.Second}, log)
	env.Service.OnDelete(pulls.CancelServer)
	pullCtx, stopPulls := context.WithCancel(context.Background())
	pullDone := make(chan error, 1)
	go func() { pullDone <- pulls.Run(pullCtx) }()
	<-pulls.Recovered() // as kiln serve: no request before recovery
	t.Cleanup(func() {
		stopPulls()
		if err := <-pullDone; err != nil {
			t.Errorf("pull.Run = %v", err)
		}
	})
	box, err := secretbox.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	sftpSvc := sftp.NewService(db, box, env.Service, sftp.ServiceOptions{PublicHost: "127.0.0.1"}, log)
	// The mod catalogs: a local stand-in serving CurseForge's and
	// Modrinth's documented answers (internal/modcatalog's fixtures).
	catUp := httptest.NewServer(catalogStub(t))
	t.Cleanup(catUp.Close)
	catalogs, err := modcatalog.New(netguard.NewPolicy(allow, testResolver{}), modcatalog.Options{
		CurseForgeKey: "test-key", CurseForgeURL: catUp.URL, ModrinthURL: catUp.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(catalogs.Close)
	mods := modcatalog.NewInstaller(catalogs, env.Service, env.Catalog, pulls)
	packs, err := modcatalog.NewModpacks(catalogs, env.Service, modcatalog.ModpackOptions{}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(packs.Close)
	deps := Deps{Log: log, Auth: a, Limiter: limiter, Servers: env.Service, Catalog: env.Catalog, Files: files.NewService(env.Service),
		Pulls: pulls, Archives: archive.NewService(env.Service), Deploy: deploy.New(db, env.Catalog, env.Node.Ports()),
		Snapshots: snaps, SFTP: sftpSvc, Catalogs: catalogs, Mods: mods, Modpacks: packs, Metrics: metrics.New(), Ready: db.Ping,
		Secrets: secrets.New(db, box)}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	h := &harness{t: t, srv: srv, url: ts.URL, db: db, auth: a, token: string(tok), logs: logs, dataDir: env.DataDir, blobDir: blobDir,
		ports: env.Node.Ports()}
	h.client = &http.Client{Transport: &validatingTransport{t: t, srv: srv, base: http.DefaultTransport}}
	return h
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far, read under the lock: services log
// from their own goroutines while a test reads.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// validatingTransport validates every response of an API route against the
// documents and records the operation as exercised.
type validatingTransport struct {
	t    *testing.T
	srv  *Server
	base http.RoundTripper
}

func (vt *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := vt.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// An event stream is validated on its status and headers (its body is
	// an open-ended string) and handed over unread, so tests can follow it.
	var body []byte
	stream := resp.Header.Get("Content-Type") == "text/event-stream"
	if !stream {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	defer func() {
		if stream {
			return
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}()

	rt, ok := vt.srv.routeFor(req)
	if !ok || rt.op == "" {
		return resp, nil // 404/405 and operations endpoints are not in the document
	}
	exercised.Store(rt.op, true)
	ours, seed, seedOps := loadValidators(vt.t)
	check := func(name string, v validator.Validator) {
		vreq := req.Clone(req.Context())
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
		vresp := *resp
		vresp.Body = io.NopCloser(bytes.NewReader(body))
		if ok, errs := v.ValidateHttpResponse(vreq, &vresp); !ok {
			for _, e := range errs {
				vt.t.Errorf("%s %s → %d: response does not match the %s document: %s: %s (%v)\nbody: %s",
					req.Method, req.URL.Path, resp.StatusCode, name, e.Message, e.Reason, e.SchemaValidationErrors, body)
			}
		}
	}
	check("Kiln", ours)
	if seedOps[rt.method+" "+rt.path] {
		check("seed", seed)
	}
	return resp, nil
}

// routeFor finds the table route a request would reach.
func (s *Server) routeFor(r *http.Request) (route, bool) {
	if p := r.URL.Path; p != "" && p != cleanPath(p) {
		return route{}, false // ServeHTTP answers 404 before the mux
	}
	_, pattern := s.mux.Handler(r)
	for _, rt := range s.routes {
		if rt.method+" "+Prefix+rt.path == pattern {
			return rt, true
		}
	}
	return route{}, false
}

// do sends a request with the harness token (token "" = none) and returns
// status, headers and body.
func (h *harness) do(method, path, token string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.url+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// wantError checks an error answer's status and exact body.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode, wantMsgPart string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status = %d, want %d (body %s)", status, wantStatus, body)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	if e["code"] != wantCode {
		t.Errorf("code = %v, want %s (body %s)", e["code"], wantCode, body)
	}
	msg, _ := e["error"].(string)
	if msg == "" || !strings.Contains(msg, wantMsgPart) {
		t.Errorf("error = %q, want a sentence containing %q", msg, wantMsgPart)
	}
	for k := range e {
		if k != "error" && k != "code" && k != "issues" {
			t.Errorf("error body has unexpected key %q: %s", k, body)
		}
	}
}

func mustJSON(data []byte) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		panic(err)
	}
	return m
}

// testResolver answers the names the tests use, and nothing else: no test
// ever asks a real DNS server.
type testResolver struct{}

func (testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "files.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "evil.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.3")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
