package pull_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/store"
)

// Test servers and teams. Every test gets its own database, so the ids
// can be fixed.
const (
	teamA   = "team_A"
	teamB   = "team_B"
	serverA = "00000000-0000-4000-8000-00000000000a"
	server2 = "00000000-0000-4000-8000-0000000000a2" // team A's second server
	serverB = "00000000-0000-4000-8000-00000000000b"
)

// roots is the real alternative to *servers.Service behind pull.Servers:
// each server is a directory in t.TempDir() with a disk limit, its free
// space measured by servers.DiskUsage like the real one does.
type roots struct {
	mu  sync.Mutex
	srv map[string]*root
}

type root struct {
	team  string
	dir   string
	limit int64
	disk  *quota.Account
}

func (r *roots) Access(_ context.Context, teamID, id string, write bool) (servers.Access, error) {
	r.mu.Lock()
	s := r.srv[id]
	r.mu.Unlock()
	if s == nil || s.team != teamID {
		return servers.Access{}, servers.ErrNotFound
	}
	a := servers.Access{Root: s.dir}
	if write {
		r.mu.Lock()
		if s.disk == nil {
			s.disk = quota.NewAccount(s.limit, quota.TempNames{})
			if _, err := s.disk.Walk(s.dir, time.Time{}); err != nil {
				r.mu.Unlock()
				return servers.Access{}, err
			}
		}
		s.disk.SetLimit(s.limit)
		a.Disk = s.disk
		r.mu.Unlock()
	}
	return a, nil
}

// wroteFor is what the server's ledger holds: the roots start empty, so
// it is what downloads committed.
func (r *roots) wroteFor(id string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := r.srv[id].disk; d != nil {
		return d.Figures().Used
	}
	return 0
}

func (r *roots) dir(id string) string { return r.srv[id].dir }

func (r *roots) setLimit(id string, limit int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.srv[id].limit = limit
}

// hosts is a netguard.Resolver backed by a table: no DNS in tests.
type hosts map[string][]netip.Addr

func (h hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a := h[host]; len(a) > 0 {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var testHosts = hosts{
	"files.test": {netip.MustParseAddr("127.0.0.1")},
	"evil.test":  {netip.MustParseAddr("127.0.0.3")},
}

// env is a Manager over a real database, real directories and a netguard
// policy that allows 127.0.0.1/32 only.
type env struct {
	db    *store.DB
	roots *roots
	m     *pull.Manager
	stop  func() error // ends Run and returns its error
}

const defaultLimit = 10 << 20

func newEnv(t *testing.T, db *store.DB, opts pull.Options) *env {
	t.Helper()
	seed(t, db)
	base := t.TempDir()
	r := &roots{srv: map[string]*root{}}
	for id, team := range map[string]string{serverA: teamA, server2: teamA, serverB: teamB} {
		dir := filepath.Join(base, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		r.srv[id] = &root{team: team, dir: dir, limit: defaultLimit}
	}
	e := &env{db: db, roots: r}
	e.start(t, opts)
	return e
}

// start makes a new Manager over the env's database and roots (as a new
// kiln serve process would) and runs it until the test ends.
func (e *env) start(t *testing.T, opts pull.Options) {
	t.Helper()
	allow, err := netguard.ParseAllowList([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.m = pull.NewManager(e.db, e.roots, netguard.NewPolicy(allow, testHosts), opts, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.m.Run(ctx) }()
	var once sync.Once
	var runErr error
	e.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return within 30s of its context ending")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-e.m.Recovered():
	case <-time.After(30 * time.Second):
		t.Fatal("Recovered not closed within 30s")
	}
}

// testWriter sends log lines to t.Log (until the test ends).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// seed inserts the teams and servers the downloads table refers to.
func seed(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := t.Context()
	for _, team := range []string{teamA, teamB} {
		if _, err := db.Write().ExecContext(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
	}
	port := 30000
	for id, team := range map[string]string{serverA: teamA, server2: teamA, serverB: teamB} {
		port++
		_, err := db.Write().ExecContext(ctx, `
			INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
			VALUES ($1, $2, $3, 'paper', '1.21.4', 'offline', 'local', $4, 1024, 10, 100, 1, 1)`, id, team, "s"+strconv.Itoa(port), port)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls the download until cond holds or 30 s pass.
func (e *env) waitFor(t *testing.T, team, srv, id string, what string, cond func(pull.Download) bool) pull.Download {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := e.m.Get(t.Context(), team, srv, id)
		if err != nil {
			t.Fatalf("Get(%s) = %v", id, err)
		}
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("download %s: %s not reached within 30s; last: %+v", id, what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) waitFinished(t *testing.T, team, srv, id string) pull.Download {
	t.Helper()
	return e.waitFor(t, team, srv, id, "a final status", func(d pull.Download) bool { return !d.Status.Active() })
}

func (e *env) mustStart(t *testing.T, srv, rawURL, dir, name string) pull.Download {
	t.Helper()
	d, err := e.m.Start(t.Context(), teamA, srv, rawURL, dir, name)
	if err != nil {
		t.Fatalf("Start(%q, %q, %q) = %v", rawURL, dir, name, err)
	}
	return d
}

// assertEmptyTree fails if anything but directories is under dir: no
// file, no temporary file left by a download.
func assertEmptyTree(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walk %s: %v", p, err)
			return nil
		}
		if !d.IsDir() {
			t.Errorf("%s was left behind", p)
		}
		return nil
	})
}

func payload(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	r.Read(b)
	return b
}

// upstream is the internet, on 127.0.0.1. Handlers that wait do so until
// the request ends, release is closed, or the test ends.
type upstream struct {
	*httptest.Server
	release chan struct{}
	ended   chan struct{} // a /hang request ended
	data    []byte
}

const dataLen = 256 << 10

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{release: make(chan struct{}), ended: make(chan struct{}, 16), data: payload(dataLen)}
	quit := make(chan struct{})
	wait := func(r *http.Request) {
		select {
		case <-u.release:
		case <-r.Context().Done():
		case <-quit:
		}
	}
	mux := http.NewServeMux()
	// /file/{name}: the payload with Content-Length.
	mux.HandleFunc("/file/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(u.data)))
		w.Write(u.data)
	})
	// /chunked/{n}: n bytes of the payload, no Content-Length.
	mux.HandleFunc("/chunked/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		data := payload(n)
		for len(data) > 0 {
			k := min(len(data), 4096)
			w.Write(data[:k])
			w.(http.Flusher).Flush()
			data = data[k:]
		}
	})
	// /sized/{n}: n bytes with Content-Length.
	mux.HandleFunc("/sized/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(payload(n))
	})
	// /half/{name}: Content-Length of the whole payload, half of it, then
	// the rest after release.
	mux.HandleFunc("/half/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(u.data)))
		w.Write(u.data[:len(u.data)/2])
		w.(http.Flusher).Flush()
		wait(r)
		w.Write(u.data[len(u.data)/2:])
	})
	// /hang/{n}: n bytes without Content-Length, then nothing until the
	// request ends (or release: then the rest of the payload).
	mux.HandleFunc("/hang/{n}", func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case u.ended <- struct{}{}:
			default:
			}
		}()
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Write(payload(n))
		w.(http.Flusher).Flush()
		wait(r)
		w.Write(payload(1000))
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/hops/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n == 0 {
			io.WriteString(w, "ok")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hops/%d", n-1), http.StatusFound)
	})
	u.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(quit)
		u.Close()
	})
	return u
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
