package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/deploy"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/metrics"
	"github.com/kilnhq/kiln/internal/modcatalog"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/ratelimit"
	"github.com/kilnhq/kiln/internal/secrets"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/sftp"
	"github.com/kilnhq/kiln/internal/snapshot"
)

// Prefix is the base path of the client API.
const Prefix = "/api/client/v1"

// Config holds the operator settings the HTTP layer needs. Zero
// durations and rates take the defaults of doc.go (tests shorten them).
type Config struct {
	// RateLimit is requests per minute per token (api.md §1.4); the
	// per-route limits scale with it.
	RateLimit int
	// TransferIdle and MinTransferRate bound body reads and answer writes:
	// each MiB must move within TransferIdle plus its time at
	// MinTransferRate (bytes per second). Defaults 30 s, 64 KiB/s.
	TransferIdle    time.Duration
	MinTransferRate int64
	// StreamHeartbeat is how often a console stream sends a keep-alive
	// comment and checks its token and server again (default 15 s);
	// StreamMaxLife is when it ends at the latest (default 24 h).
	StreamHeartbeat time.Duration
	StreamMaxLife   time.Duration
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.TransferIdle <= 0 {
		c.TransferIdle = defaultTransferIdle
	}
	if c.MinTransferRate <= 0 {
		c.MinTransferRate = defaultMinTransferRate
	}
	if c.StreamHeartbeat <= 0 {
		c.StreamHeartbeat = defaultStreamHeartbeat
	}
	if c.StreamMaxLife <= 0 {
		c.StreamMaxLife = defaultStreamMaxLife
	}
	return c
}

// Deps are the domain services the handlers call.
type Deps struct {
	Log     *slog.Logger
	Auth    *auth.Service
	Limiter ratelimit.Limiter
	Servers *servers.Service
	Catalog *catalog.Catalog
	Files   *files.Service
	// Archives compresses and decompresses server files.
	Archives *archive.Service
	Pulls    *pull.Manager
	// Deploy keeps deployment configurations and their versions.
	Deploy *deploy.Service
	// Runs is the queue of deployment runs; nil until kiln serve runs an
	// executor, and then the run routes answer 503 UNAVAILABLE (nothing
	// would execute what they queue).
	Runs *runs.Queue
	// Planner answers what a run of a configuration would do, changing
	// nothing; nil answers 503 UNAVAILABLE, as the run routes do.
	Planner Planner
	// RunQueued, when set, is told a run was queued (kiln serve wakes its
	// executor: a run starts at once instead of at the next poll).
	RunQueued func()
	// Secrets keeps the teams' secrets (names and sealed values).
	// Required.
	Secrets *secrets.Service
	// Snapshots takes, restores and deletes snapshots. Required.
	Snapshots *snapshot.Service
	// SFTP issues the SFTP credentials. Required.
	SFTP *sftp.Service
	// Catalogs searches CurseForge and Modrinth, Mods installs from them.
	// Required.
	Catalogs *modcatalog.Service
	Mods     *modcatalog.Installer
	Modpacks *modcatalog.Modpacks
	Metrics  *metrics.Metrics
	// Ready reports whether the service can answer (database reachable).
	Ready func(ctx context.Context) error
}

// Server is the HTTP handler of kiln serve.
type Server struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	mux      *http.ServeMux
	openapi  []byte
	routes   []route
	lists    listEncodings // encoded server lists, by team
	transfer transferLimits
	unclean  http.Handler // a path with an empty, "." or ".." segment
	// failed counts requests with a missing or bad token per client
	// address (this process's, unauthFailures): past it, an address's
	// requests are refused before their token is looked up.
	failed *ratelimit.Memory
}

// unauthFailures is how many requests with a missing or bad token one
// client address may make a minute (a burst of as many) before its
// requests are refused without a look-up of their token: each look-up
// is a database query, so an unauthenticated client must not be able to
// make the database do unbounded work.
const unauthFailures = 60

// unauthRule is unauthFailures a minute.
func unauthRule() ratelimit.Rule { return ratelimit.Rule{Limit: unauthFailures, Period: time.Minute} }

// New builds the handler with every route registered.
func New(cfg Config, deps Deps) (*Server, error) {
	if cfg.RateLimit < 1 {
		return nil, fmt.Errorf("rate limit must be at least 1 request per minute, got %d", cfg.RateLimit)
	}
	if deps.Snapshots == nil || deps.SFTP == nil || deps.Catalogs == nil || deps.Mods == nil || deps.Modpacks == nil || deps.Secrets == nil {
		return nil, errors.New("api: Deps.Snapshots, SFTP, Catalogs, Mods, Modpacks and Secrets are required")
	}
	doc, err := openAPIJSON()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, deps: deps, log: deps.Log, mux: http.NewServeMux(), openapi: doc,
		transfer: transferLimits{idle: cfg.TransferIdle, rate: cfg.MinTransferRate}, failed: ratelimit.NewMemory(time.Now)}
	s.routes = s.table()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+Prefix+rt.path, s.wrap(rt))
	}
	ops := []route{
		{method: http.MethodGet, path: "/healthz", public: true, h: s.healthz},
		{method: http.MethodGet, path: "/readyz", public: true, h: s.readyz},
		{method: http.MethodGet, path: "/metrics", public: true, h: func(w http.ResponseWriter, r *http.Request) error {
			deps.Metrics.Handler().ServeHTTP(w, r)
			return nil
		}},
	}
	for _, rt := range ops {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	// One route label for every request no pattern matched: metrics
	// never carry a client's path (metrics.ObserveRequest bounds methods).
	s.mux.Handle("/", s.wrap(route{path: unmatchedRoute, public: true, h: s.fallback}))
	s.unclean = s.wrap(route{path: unmatchedRoute, public: true, h: func(w http.ResponseWriter, r *http.Request) error {
		return newHTTPError(http.StatusNotFound, codeNotFound,
			"no such endpoint: "+r.URL.Path+" has an empty, \".\" or \"..\" segment (a variable left empty?)")
	}})
	deps.Metrics.RegisterCounts("kiln_servers", "Servers by status.", "status", deps.Servers.CountByStatus, deps.Log)
	return s, nil
}

// unmatchedRoute is the route label of requests no route matched.
const unmatchedRoute = "unmatched"

// ServeHTTP implements http.Handler. A path net/http's mux would
// redirect to its clean form (a double slash, what an empty shell
// variable makes, or a "." or ".." segment) answers the JSON 404 every
// unknown path does, never the mux's HTML 307: a client following it
// would call another endpoint than the one it meant.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p != "" && p != cleanPath(p) {
		s.unclean.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath is the path net/http's ServeMux routes p to (path.Clean, a
// trailing slash kept).
func cleanPath(p string) string {
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// fallback answers requests no route matched: 405 with Allow when the path
// exists under another method, else 404.
func (s *Server) fallback(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return newHTTPError(http.StatusMethodNotAllowed, codeMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", ")))
	}
	return newHTTPError(http.StatusNotFound, codeNotFound, "no such endpoint: "+r.URL.Path)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.deps.Ready(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "database unreachable"})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(s.openapi)
	return nil
}
