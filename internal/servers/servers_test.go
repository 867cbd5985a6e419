package servers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/eventually"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/slp"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

// team returns the id of the bootstrap team of db.
func team(t *testing.T, db *store.DB) string {
	t.Helper()
	a, err := auth.NewService(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, _, err := a.Bootstrap(t.Context()); err != nil {
		t.Fatal(err)
	}
	tm, err := a.TeamByName(t.Context(), auth.BootstrapTeam)
	if err != nil {
		t.Fatal(err)
	}
	return tm.ID
}

// waitFor polls the server until cond holds; it fails after 30 s.
func waitFor(t *testing.T, svc *servers.Service, teamID, id, what string, cond func(servers.Server) bool) servers.Server {
	t.Helper()
	return eventually.Value(t, eventually.Within, "server "+id+" "+what, func() (servers.Server, bool, string) {
		sv, err := svc.Get(t.Context(), teamID, id)
		if err != nil {
			t.Fatalf("Get(%s) = %v", id, err)
		}
		if cond(sv) {
			return sv, true, ""
		}
		console, _ := svc.Console(t.Context(), teamID, id, 50)
		return sv, false, fmt.Sprintf("last status %q, install_error %v\nconsole:\n%s", sv.Status, sv.InstallError, strings.Join(console, "\n"))
	})
}

func waitStatus(t *testing.T, svc *servers.Service, teamID, id, status string) servers.Server {
	t.Helper()
	return waitFor(t, svc, teamID, id, "status "+status, func(sv servers.Server) bool { return sv.Status == status })
}

func waitConsole(t *testing.T, svc *servers.Service, teamID, id, want string, times int) {
	t.Helper()
	eventually.True(t, eventually.Within, fmt.Sprintf("the console showing %q %d times", want, times), func() (bool, string) {
		lines, _ := svc.Console(t.Context(), teamID, id, 2000)
		n := 0
		for _, l := range lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		return n >= times, "console:\n" + strings.Join(lines, "\n")
	})
}

func runtimeRef(t *testing.T, db *store.DB, id string) string {
	t.Helper()
	var ref *string
	if err := db.Read().QueryRowContext(t.Context(), `SELECT runtime_ref FROM servers WHERE id = $1`, id).Scan(&ref); err != nil {
		t.Fatal(err)
	}
	if ref == nil {
		return ""
	}
	return *ref
}

func newTestServer(t *testing.T, svc *servers.Service, teamID string) servers.Server {
	t.Helper()
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "s", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	return waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
}

// TestCrashRestartPolicy kills a running server's process from outside:
// Kiln restarts it three times, then leaves it crashed; a start by hand
// works again.
func TestCrashRestartPolicy(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	// Every restart the policy schedules asks this clock for its wait.
	var scheduled atomic.Int32
	after := func(d time.Duration) <-chan time.Time { scheduled.Add(1); return time.After(d) }
	env := serverstest.New(t, db, serverstest.Options{Servers: servers.Options{RestartBackoff: 20 * time.Millisecond, After: after}})
	svc := env.Service
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	kill := func() {
		t.Helper()
		waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
		ref := runtimeRef(t, db, sv.ID)
		pid, err := strconv.Atoi(strings.Split(ref, ":")[0])
		if err != nil {
			t.Fatalf("runtime_ref %q of a running server", ref)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	for i := 1; i <= 3; i++ {
		kill()
		waitConsole(t, svc, teamID, sv.ID, fmt.Sprintf("(automatic restart %d of 3)", i), 1)
	}
	kill()
	waitConsole(t, svc, teamID, sv.ID, "crashed 4 times in 10m0s; not restarting", 1)
	waitStatus(t, svc, teamID, sv.ID, servers.StatusCrashed)
	// It stays crashed: no restart is scheduled (the clock asked 3 times,
	// all before the 4th crash was seen: each restart ran).
	if n := scheduled.Load(); n != 3 || runtimeRef(t, db, sv.ID) != "" {
		t.Fatalf("after the 4th crash: %d restarts scheduled, ref %q; want 3 and no instance", n, runtimeRef(t, db, sv.ID))
	}
	if err := svc.Command(t.Context(), teamID, sv.ID, "list"); !errors.Is(err, servers.ErrOffline) {
		t.Errorf("Command to a crashed server = %v, want ErrOffline", err)
	}
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	kill() // the budget was reset by the start by hand
	waitConsole(t, svc, teamID, sv.ID, "(automatic restart 1 of 3)", 2)
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	// Once the service has stopped (every background start waited for),
	// the count is final: the 4th crash scheduled nothing, even late.
	env.Stop()
	if n := scheduled.Load(); n != 4 {
		t.Errorf("restarts scheduled in all = %d, want 4 (3, then 1 after the start by hand)", n)
	}
}

// fillUpstream serves the PaperMC Fill v3 shapes under a mirror root:
// one version (1.21.4), one STABLE build whose jar is jar and whose
// published sha256 is sum.
type fillUpstream struct {
	srv       *httptest.Server
	jar       []byte
	sum       atomic.Value // string
	downloads atomic.Int32
	// hang, when set, makes the jar download wait until the client gives
	// up; entered is signalled when it starts.
	hang    bool
	entered chan struct{}
}

func newFillUpstream(t *testing.T, jar []byte) *fillUpstream {
	u := &fillUpstream{jar: jar, entered: make(chan struct{}, 1)}
	h := sha256.Sum256(jar)
	u.sum.Store(hex.EncodeToString(h[:]))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"versions":[{"version":{"id":"1.21.4","java":{"version":{"minimum":21}}},"builds":[232]}]}`)
	})
	mux.HandleFunc("GET /fill.papermc.io/v3/projects/paper/versions/1.21.4/builds", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `[{"id":232,"channel":"STABLE","downloads":{"server:default":{"name":"paper-1.21.4-232.jar","size":%d,
			"url":"https://fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar","checksums":{"sha256":%q}}}}]`,
			len(u.jar), u.sum.Load().(string))
	})
	mux.HandleFunc("GET /fill-data.papermc.io/v1/objects/abc/paper-1.21.4-232.jar", func(w http.ResponseWriter, r *http.Request) {
		u.downloads.Add(1)
		if u.hang {
			u.entered <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.Write(u.jar)
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

// TestInstallChecksumMismatch: an upstream that publishes a wrong sha256
// fails the install with a clear reason on the server, leaves no jar in
// the root and nothing in the cache; once the upstream is right, a
// reinstall succeeds.
func TestInstallChecksumMismatch(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar"))
	up.sum.Store(strings.Repeat("ab", 32))
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL})
	svc := env.Service
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048, Env: map[string]string{"EULA": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, svc, teamID, sv.ID, "failed to install", func(s servers.Server) bool { return s.InstallError != nil })
	if got.Status != servers.StatusOffline || !strings.Contains(*got.InstallError, "sha256 of") || !strings.Contains(*got.InstallError, "upstream published "+strings.Repeat("ab", 32)) {
		t.Errorf("after a bad checksum: status %q, install_error %q; want offline and a sentence naming the sha256 checksum", got.Status, *got.InstallError)
	}
	root := env.Node.Root(sv.ID)
	if _, err := os.Stat(filepath.Join(root, "server.jar")); !os.IsNotExist(err) {
		t.Errorf("server.jar exists after a failed install: %v", err)
	}
	blobs, _ := filepath.Glob(filepath.Join(env.DataDir, "cache", "sha256", "*"))
	if len(blobs) != 0 {
		t.Errorf("cache holds %v after a failed verification; want nothing", blobs)
	}
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); !errors.Is(err, servers.ErrInstallFailed) {
		t.Errorf("Power(start) after a failed install = %v, want ErrInstallFailed", err)
	}
	console, _ := svc.Console(t.Context(), teamID, sv.ID, 10)
	if !slices.ContainsFunc(console, func(l string) bool { return strings.HasPrefix(l, "[kiln] install failed: ") }) {
		t.Errorf("console = %q, want the failure reason", console)
	}

	h := sha256.Sum256(up.jar)
	up.sum.Store(hex.EncodeToString(h[:]))
	if err := svc.Reinstall(t.Context(), teamID, sv.ID, "", "1.21.4"); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
	data, err := os.ReadFile(filepath.Join(root, "server.jar"))
	if err != nil || string(data) != string(up.jar) {
		t.Errorf("server.jar = %q, %v; want the upstream jar", data, err)
	}
	if got.Version != "1.21.4" {
		t.Errorf("version = %q", got.Version)
	}
}

// TestRecoverAfterRestart stops the service as kiln serve does on SIGTERM
// with a server running, then starts a new service on the same database and
// data: the server is started again (process runtime) and answers.
func TestRecoverAfterRestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		dir := t.TempDir()
		env := serverstest.New(t, db, serverstest.Options{DataDir: dir})
		sv := newTestServer(t, env.Service, teamID)
		if err := env.Service.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, env.Service, teamID, sv.ID, servers.StatusRunning)
		env.Stop()
		// An orphan root (a delete interrupted after the row went) is removed.
		orphan := filepath.Join(dir, "servers", "0b7c5e8e-1111-4222-8333-444455556666")
		if err := os.MkdirAll(orphan, 0o750); err != nil {
			t.Fatal(err)
		}
		if _, err := slp.Ping(t.Context(), sv.Address); err == nil {
			t.Fatal("the server still answers after the service stopped (process runtime)")
		}

		env2 := serverstest.New(t, db, serverstest.Options{DataDir: dir})
		_ = env2
		got := waitStatus(t, env2.Service, teamID, sv.ID, servers.StatusRunning)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := slp.Ping(ctx, got.Address); err != nil {
			t.Errorf("ping after recovery: %v", err)
		}
		if _, err := os.Stat(orphan); !os.IsNotExist(err) {
			t.Errorf("orphan root still there: %v", err)
		}
	})
}

// TestDiskUsage measures what the root holds, counts a symlink as a link
// (never what it points to) and reports the limit.
func TestDiskUsage(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	sv := newTestServer(t, env.Service, teamID)
	root, err := env.Service.Root(t.Context(), teamID, sv.ID)
	if err != nil || root != env.Node.Root(sv.ID) {
		t.Fatalf("Root = %q, %v", root, err)
	}
	// Measured at the end of the install: the marker and server.properties.
	if sv.Resources.DiskBytes <= 0 {
		t.Errorf("disk_bytes right after the install = %d, want what it wrote", sv.Resources.DiskBytes)
	}
	before, err := env.Service.DiskUsage(t.Context(), teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "world", "region"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "world", "region", "r.0.0.mca"), make([]byte, 100_000), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 5_000_000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(big, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	got, err := env.Service.DiskUsage(t.Context(), teamID, sv.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The new file costs its blocks, and so do the two new directories;
	// the link one block, its target nothing.
	if got.UsedBytes != before.UsedBytes+quota.Cost(100_000)+2*quota.EntryCost+quota.EntryCost || got.LimitBytes != 1024<<20 || got.Free() != 1024<<20-got.UsedBytes {
		t.Errorf("DiskUsage = %+v (before %+v), want 100000 bytes (and 2 directories and a link) more used and a 1 GiB limit", got, before)
	}
	listed, _ := env.Service.Get(t.Context(), teamID, sv.ID)
	if listed.Resources.DiskBytes != got.UsedBytes {
		t.Errorf("disk_bytes = %d, want the fresh measure %d", listed.Resources.DiskBytes, got.UsedBytes)
	}
	if _, err := env.Service.DiskUsage(t.Context(), "team_other", sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("DiskUsage of another team's server = %v, want ErrNotFound", err)
	}
}

// TestReinstallRunning reinstalls a running server: it is stopped,
// reinstalled with the new version (world kept) and started again; a
// server that is installing refuses power and another reinstall.
func TestReinstallRunning(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	sv := newTestServer(t, svc, teamID)
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
	if err := svc.Reinstall(t.Context(), teamID, sv.ID, "", "1.20.1"); err != nil {
		t.Fatal(err)
	}
	// Right after the call the database no longer shows the old instance
	// running: the call records installing, and the reinstall then runs in
	// the background (stopping, offline, installing, starting), so any of
	// its states may be read here, or — when this goroutine was held up
	// meanwhile — its end, running the new install.
	switch got, _ := svc.Get(t.Context(), teamID, sv.ID); got.Status {
	case servers.StatusInstalling, servers.StatusStopping, servers.StatusOffline, servers.StatusStarting:
	case servers.StatusRunning:
		console, _ := svc.Console(t.Context(), teamID, sv.ID, 2000)
		if !slices.ContainsFunc(console, func(l string) bool { return strings.Contains(l, "[kiln] installed Kiln test server 1.20.1") }) {
			t.Errorf("status right after Reinstall = running, and the console shows no reinstall:\n%s", strings.Join(console, "\n"))
		}
	default:
		t.Errorf("status right after Reinstall = %q, want a state of the reinstall", got.Status)
	}
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil && !errors.Is(err, servers.ErrInstalling) {
		t.Errorf("Power during a reinstall = %v, want nil (already done) or ErrInstalling", err)
	}
	waitConsole(t, svc, teamID, sv.ID, "[kiln] installed Kiln test server 1.20.1", 1)
	got := waitFor(t, svc, teamID, sv.ID, "running 1.20.1", func(s servers.Server) bool {
		return s.Status == servers.StatusRunning && s.Version == "1.20.1"
	})
	if _, err := os.Stat(filepath.Join(env.Node.Root(got.ID), "world")); err != nil {
		t.Errorf("world/ after reinstall: %v", err)
	}
	if err := svc.Reinstall(t.Context(), teamID, sv.ID, "nope", ""); err == nil || !strings.Contains(err.Error(), "software") {
		t.Errorf("Reinstall to unknown software = %v, want a validation error naming software", err)
	}
}

// TestDeleteWhileInstalling deletes a server whose download hangs: the
// install is cancelled, the delete does not wait for it, and nothing of the
// server is left.
func TestDeleteWhileInstalling(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	up := newFillUpstream(t, []byte("jar"))
	up.hang = true
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL})
	sv, err := env.Service.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048, Env: map[string]string{"EULA": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-up.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the install never reached the download")
	}
	if err := env.Service.Delete(t.Context(), teamID, sv.ID); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := env.Service.Get(t.Context(), teamID, sv.ID); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(env.Node.Root(sv.ID)); !os.IsNotExist(err) {
		t.Errorf("root after Delete: %v", err)
	}
}

// TestListSeesEveryChange: the list is served from memory, but a change
// made behind the service's back (another replica, raw SQL) shows at once,
// because triggers bump the team's list version.
func TestListSeesEveryChange(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		env := serverstest.New(t, db, serverstest.Options{})
		svc := env.Service
		sv := newTestServer(t, svc, teamID)
		names := func() string {
			t.Helper()
			list, err := svc.Listing(t.Context(), teamID)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, s := range list.Servers {
				out = append(out, s.Name+":"+s.Status)
			}
			return strings.Join(out, ",")
		}
		if got := names(); got != "s:offline" {
			t.Fatalf("list = %q", got)
		}
		version := func() int64 {
			var v int64
			if err := db.Read().QueryRowContext(t.Context(), `SELECT servers_version FROM teams WHERE id = $1`, teamID).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := db.Write().ExecContext(t.Context(), q, args...); err != nil {
				t.Fatal(err)
			}
		}
		v0 := version()
		exec(`UPDATE servers SET desired_state = 'running', updated_at = 5 WHERE id = $1`, sv.ID)
		exec(`UPDATE servers SET status = status WHERE id = $1`, sv.ID)
		if v := version(); v != v0 {
			t.Errorf("version moved %d → %d on changes the list does not show", v0, v)
		}
		exec(`UPDATE servers SET name = 'renamed', status = 'crashed' WHERE id = $1`, sv.ID)
		if got := names(); got != "renamed:crashed" {
			t.Errorf("after an update behind the service's back: list = %q", got)
		}
		exec(`INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb, cpu_percent, created_at, updated_at)
			VALUES ('5c8a1c52-0000-4000-8000-000000000001', $1, 'other-replica', 'kiln-test', 'dev', 'offline', 'n2', 1, 512, 1024, 100, $2, $2)`,
			teamID, time.Now().UnixMilli()+1000)
		if got := names(); got != "other-replica:offline,renamed:crashed" {
			t.Errorf("after an insert: list = %q", got)
		}
		exec(`DELETE FROM servers WHERE id = '5c8a1c52-0000-4000-8000-000000000001'`)
		if got := names(); got != "renamed:crashed" {
			t.Errorf("after a delete: list = %q", got)
		}
	})
}

// TestListensWhereKilnSays: before a start Kiln writes the listen address
// and the environment's settings into server.properties; the game server
// then answers on the bind host (127.0.0.1) and nowhere else on the
// machine (127.0.0.2 is refused), and a hand-edited managed key is set
// back at the next start while other lines stay.
func TestListensWhereKilnSays(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "s", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024,
		Env: map[string]string{"MOTD": "Where Kiln says"}})
	if err != nil {
		t.Fatal(err)
	}
	sv = waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
	propsPath := filepath.Join(env.Node.Root(sv.ID), "server.properties")
	for round := range 2 {
		if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, svc, teamID, sv.ID, servers.StatusRunning)
		props, err := os.ReadFile(propsPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"server-ip=127.0.0.1\n", "server-port=" + strconv.Itoa(sv.Port) + "\n", "motd=Where Kiln says\n"} {
			if !strings.Contains(string(props), want) {
				t.Errorf("round %d: server.properties lacks %q:\n%s", round, want, props)
			}
		}
		if round == 1 && !strings.Contains(string(props), "difficulty=hard\n") {
			t.Errorf("a line Kiln does not manage was lost:\n%s", props)
		}
		st, err := slp.Ping(t.Context(), "127.0.0.1:"+strconv.Itoa(sv.Port))
		if err != nil || !strings.Contains(string(st.Raw), "Where Kiln says") {
			t.Errorf("round %d: ping 127.0.0.1 = %s, %v", round, st.Raw, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		if _, err := slp.Ping(ctx, "127.0.0.2:"+strconv.Itoa(sv.Port)); err == nil {
			t.Errorf("round %d: the server answers on 127.0.0.2: it listens beyond its bind host", round)
		}
		cancel()
		if err := svc.Power(t.Context(), teamID, sv.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, svc, teamID, sv.ID, servers.StatusOffline)
		// By hand: move the server elsewhere and add a setting of one's own.
		edited := strings.ReplaceAll(string(props), "server-ip=127.0.0.1", "server-ip=0.0.0.0") + "difficulty=hard\n"
		if err := os.WriteFile(propsPath, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiskFigureRefreshedInBackground: a write that finds the disk figure
// stale is answered from it (no walk on its path) and has the root walked
// in the background, so what the game server wrote meanwhile shows soon
// after; a server whose figure was invalidated is walked before the write.
func TestDiskFigureRefreshedInBackground(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{Servers: servers.Options{DiskFresh: 50 * time.Millisecond}})
	svc := env.Service
	sv := newTestServer(t, svc, teamID)
	root := env.Node.Root(sv.ID)
	limit := int64(sv.DiskMB) << 20
	a, err := svc.Access(t.Context(), teamID, sv.ID, true) // never walked since install: walks now
	if err != nil {
		t.Fatal(err)
	}
	base := limit - a.Disk.Figures().Free()
	// The game server writes 3 MB behind Kiln's back; once the figure is
	// stale, a write is answered from it and asks for a walk in the
	// background. That walk runs beside this goroutine and may land
	// before the figure is read here (CI saw it): such a round proves
	// nothing either way and is taken again with a new file. A walk on
	// the write's path would show in every round.
	answered := false
	for round := 0; round < 5 && !answered; round++ {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("world%d.dat", round)), make([]byte, 3_000_000), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the figure is now stale (DiskFresh is wall-clock time)
		a, err = svc.Access(t.Context(), teamID, sv.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		switch got := limit - a.Disk.Figures().Free(); {
		case got == base:
			answered = true
		case got >= base+3_000_000: // the background walk came first
			base = got
		default:
			t.Fatalf("a stale figure's write was answered with %d used bytes, neither the last figure %d nor a walk's", got, base)
		}
	}
	if !answered {
		t.Errorf("a stale figure's write was answered with a fresh walk 5 times in a row, want the last figure (no walk on its path)")
	}
	waitFor(t, svc, teamID, sv.ID, "the background walk to count the game server's file", func(s servers.Server) bool {
		return s.Resources.DiskBytes >= base+3_000_000
	})
	// An operation of unknown effect: the next write walks first.
	if err := os.WriteFile(filepath.Join(root, "more.dat"), make([]byte, 1_000_000), 0o644); err != nil {
		t.Fatal(err)
	}
	svc.DiskChanged(sv.ID)
	if a, err = svc.Access(t.Context(), teamID, sv.ID, true); err != nil {
		t.Fatal(err)
	}
	if got := limit - a.Disk.Figures().Free(); got < base+4_000_000 {
		t.Errorf("after DiskChanged the write saw %d used bytes, want at least %d (walked first)", got, base+4_000_000)
	}
}

// TestEULANotAccepted: a game server is created and installed without
// the EULA (eula.txt says false), but start and restart are refused with
// an *EULAError naming where to read it; PATCHing EULA=true (SetEnv)
// lets it start, and the start writes eula.txt from the variable.
func TestEULANotAccepted(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar"))
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL})
	svc := env.Service
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048})
	if err != nil {
		t.Fatalf("Create without EULA = %v; creating (and installing) must work", err)
	}
	waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
	eula := filepath.Join(env.Node.Root(sv.ID), "eula.txt")
	if data, _ := os.ReadFile(eula); !strings.Contains(string(data), "\neula=false\n") {
		t.Errorf("eula.txt after install = %q, want eula=false", data)
	}
	for _, action := range []string{"start", "restart"} {
		err := svc.Power(t.Context(), teamID, sv.ID, action)
		ee, ok := errors.AsType[*servers.EULAError](err)
		if !ok || !errors.Is(err, servers.ErrEULANotAccepted) {
			t.Fatalf("Power(%s) without EULA = %v, want *EULAError", action, err)
		}
		want := "the Minecraft EULA is not accepted for this paper server, so it does not start: read the EULA at https://aka.ms/MinecraftEULA, then set EULA=true in the server's env to accept it (Kiln never accepts it for you)"
		if ee.Error() != want {
			t.Errorf("Power(%s) error = %q, want %q", action, ee.Error(), want)
		}
	}
	if got, _ := svc.Get(t.Context(), teamID, sv.ID); got.DesiredState != "stopped" || got.Status != servers.StatusOffline {
		t.Errorf("after refused starts: desired %q, status %q; want stopped, offline", got.DesiredState, got.Status)
	}
	// "false" is not acceptance either.
	f := "false"
	if _, err := svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"EULA": &f}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); !errors.Is(err, servers.ErrEULANotAccepted) {
		t.Errorf("Power(start) with EULA=false = %v", err)
	}

	yes, hard, bad := "true", "hard", "nightmare"
	got, err := svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"EULA": &yes, "DIFFICULTY": &hard})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"EULA": "true", "DIFFICULTY": "hard"}; !maps.Equal(got.Env, want) {
		t.Errorf("SetEnv answered env %v, want %v", got.Env, want)
	}
	_, err = svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"DIFFICULTY": &bad, "NOPE": &yes})
	ve, ok := errors.AsType[*validate.Error](err)
	if !ok || len(ve.Issues) != 2 || ve.Issues[0].Path != "env.NOPE" || ve.Issues[1].Path != "env.DIFFICULTY" {
		t.Errorf("SetEnv(bad) = %v, want issues at env.DIFFICULTY and env.NOPE", err)
	}
	got, err = svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"DIFFICULTY": nil})
	if err != nil || !maps.Equal(got.Env, map[string]string{"EULA": "true"}) {
		t.Errorf("SetEnv(unset DIFFICULTY) = %v, %v", got.Env, err)
	}
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatalf("Power(start) with EULA=true = %v", err)
	}
	// The start writes eula.txt from the variable before it runs the
	// software (which then fails here: the jar is not a real one).
	waitFor(t, svc, teamID, sv.ID, "started", func(s servers.Server) bool {
		data, _ := os.ReadFile(eula)
		return strings.Contains(string(data), "\neula=true\n")
	})
	if err := svc.Power(t.Context(), teamID, sv.ID, "kill"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetEnv(t.Context(), teamID, uuid.NewString(), map[string]*string{"EULA": &yes}); !errors.Is(err, servers.ErrNotFound) {
		t.Errorf("SetEnv(unknown server) = %v, want ErrNotFound", err)
	}
	// Concurrent changes of different variables are all kept.
	set := map[string]string{"MOTD": "hi", "PVP": "false", "SEED": "42", "MODE": "creative", "ALLOW_FLIGHT": "true", "SPAWN_PROTECTION": "0"}
	var wg sync.WaitGroup
	for k, v := range set {
		wg.Go(func() {
			if _, err := svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{k: &v}); err != nil {
				t.Errorf("SetEnv(%s) = %v", k, err)
			}
		})
	}
	wg.Wait()
	got, _ = svc.Get(t.Context(), teamID, sv.ID)
	set["EULA"] = "true"
	if !maps.Equal(got.Env, set) {
		t.Errorf("env after concurrent SetEnv = %v, want %v", got.Env, set)
	}
}

// TestProcessJava: on the process runtime a game server runs the java of
// the major its game version needs (paper 1.21.4: Java 21) with
// JAVA_HOME set and Aikar's flags before -jar; a host without that Java
// (nor a newer one) fails the start with a sentence naming it.
func TestProcessJava(t *testing.T) {
	home := filepath.Join(t.TempDir(), "jdk-21")
	if err := os.MkdirAll(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A stand-in java: it prints what it was given, then exits.
	script := "#!/bin/sh\necho \"fake java JAVA_HOME=$JAVA_HOME RCON_PASSWORD=${RCON_PASSWORD:-unset} args: $*\"\nexit 1\n"
	if err := os.WriteFile(filepath.Join(home, "bin", "java"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(home, "release"), []byte("JAVA_VERSION=\"21.0.5\"\n"), 0o644)
	for _, tt := range []struct {
		name  string
		homes map[int]string
		want  string
	}{
		{"java 21", map[int]string{21: home}, "[kiln] fake java JAVA_HOME=" + home + " RCON_PASSWORD=unset args: -Xms1024M -Xmx1024M -XX:+AlwaysPreTouch"},
		{"no java 21", map[int]string{17: strings.Replace(home, "21", "17", 1)}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				h17 := tt.homes[17]
				os.MkdirAll(filepath.Join(h17, "bin"), 0o755)
				os.WriteFile(filepath.Join(h17, "bin", "java"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
			}
			javas, err := runtime.NewJavas(tt.homes, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			db := storetest.SQLite(t)
			teamID := team(t, db)
			up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar"))
			env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL, Servers: servers.Options{Javas: javas, RestartBackoff: time.Hour}})
			svc := env.Service
			sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048,
				Env: map[string]string{"EULA": "true", "ENABLE_RCON": "true", "RCON_PASSWORD": "not-in-the-environment"}})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
			if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, svc, teamID, sv.ID, "crashed", func(s servers.Server) bool { return s.Status == servers.StatusCrashed })
			console, _ := svc.Console(t.Context(), teamID, sv.ID, 50)
			if tt.want != "" {
				i := slices.IndexFunc(console, func(l string) bool {
					return strings.HasPrefix(l, "[kiln] fake java ") || strings.HasPrefix(l, "fake java ")
				})
				if i < 0 {
					t.Fatalf("console = %q, want the stand-in java's line", console)
				}
				line := strings.TrimPrefix(console[i], "[kiln] ")
				if want := strings.TrimPrefix(tt.want, "[kiln] "); !strings.HasPrefix(line, want) || !strings.Contains(line, "-Daikars.new.flags=true -jar server.jar --nogui --port ") {
					t.Errorf("java ran as %q, want it to start with %q and end with Aikar's flags, -jar server.jar --nogui --port", line, want)
				}
				return
			}
			want := "[kiln] failed to start: paper 1.21.4: this needs Java 21 or newer, and the host has 17"
			if !slices.ContainsFunc(console, func(l string) bool { return strings.HasPrefix(l, want) }) {
				t.Errorf("console = %q, want a line starting %q", console, want)
			}
		})
	}
}

// TestEULAWithdrawn: a start that does not come from Power (the restart
// after a crash) is refused too once EULA is no longer true: the
// sentence in the console, status offline, nothing run.
func TestEULAWithdrawn(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar"))
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL, Servers: servers.Options{RestartBackoff: time.Second}})
	svc := env.Service
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048,
		Env: map[string]string{"EULA": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
	if err := svc.Power(t.Context(), teamID, sv.ID, "start"); err != nil {
		t.Fatal(err)
	}
	no := "false"
	if _, err := svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"EULA": &no}); err != nil {
		t.Fatal(err)
	}
	// The jar is not a real one: the server crashes and the restart (or
	// the first start, had the change come first) meets the refusal.
	want := "[kiln] not started: the Minecraft EULA is not accepted for this paper server"
	waitFor(t, svc, teamID, sv.ID, "refused", func(s servers.Server) bool {
		console, _ := svc.Console(t.Context(), teamID, sv.ID, 100)
		return slices.ContainsFunc(console, func(l string) bool { return strings.HasPrefix(l, want) })
	})
	got := waitFor(t, svc, teamID, sv.ID, "offline", func(s servers.Server) bool { return s.Status == servers.StatusOffline })
	if got.DesiredState != "running" {
		t.Errorf("desired state = %q; the user's intent stays running until they stop it", got.DesiredState)
	}
}

// TestInstallWithUnknownOp: a player list that cannot be written (Mojang
// knows no such name) does not fail the install; the console says why,
// and the next start meets it again.
func TestInstallWithUnknownOp(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar")) // answers 404 for api.mojang.com
	env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL})
	svc := env.Service
	sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048,
		Env: map[string]string{"EULA": "true", "OPS": "nobody_here"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
	console, _ := svc.Console(t.Context(), teamID, sv.ID, 20)
	want := "[kiln] configure paper: OPS: ops.json: nobody_here: no Minecraft account has that name (written again at every start)"
	if !slices.Contains(console, want) {
		t.Errorf("console = %q, want %q", console, want)
	}
	if _, err := os.Stat(filepath.Join(env.Node.Root(sv.ID), "server.properties")); err != nil {
		t.Errorf("server.properties after the install: %v", err)
	}
}

// TestSecretEnvSealed: a secret variable (RCON_PASSWORD) is sealed in the
// servers table on both stores — the row never holds it in the clear —
// and every read (Get, List) opens it again; a PATCH of another variable
// keeps it and still finds the row it read (the compare-and-swap is on the
// sealed text), and the password reaches server.properties at start.
func TestSecretEnvSealed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		teamID := team(t, db)
		up := newFillUpstream(t, []byte("PK\x03\x04 not really a paper jar"))
		env := serverstest.New(t, db, serverstest.Options{MirrorURL: up.srv.URL})
		svc := env.Service
		const password = "correct-horse-battery"
		sv, err := svc.Create(t.Context(), teamID, servers.NewServer{Name: "p", Software: "paper", Version: "1.21.4", MemoryMB: 1024, DiskMB: 2048,
			Env: map[string]string{"EULA": "true", "ENABLE_RCON": "true", "RCON_PASSWORD": password}})
		if err != nil {
			t.Fatal(err)
		}
		raw := func() string {
			var s string
			if err := db.Read().QueryRowContext(t.Context(), `SELECT env FROM servers WHERE id = $1`, sv.ID).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		if r := raw(); strings.Contains(r, password) || !strings.Contains(r, `"RCON_PASSWORD":"\u0000sealed:v1:`) {
			t.Errorf("stored env = %s, want RCON_PASSWORD sealed", r)
		}
		if got, _ := svc.Get(t.Context(), teamID, sv.ID); got.Env["RCON_PASSWORD"] != password {
			t.Errorf("Get: RCON_PASSWORD = %q, want it opened", got.Env["RCON_PASSWORD"])
		}
		hard := "hard"
		got, err := svc.SetEnv(t.Context(), teamID, sv.ID, map[string]*string{"DIFFICULTY": &hard})
		if err != nil {
			t.Fatalf("SetEnv beside a sealed secret = %v", err)
		}
		if got.Env["RCON_PASSWORD"] != password || got.Env["DIFFICULTY"] != "hard" {
			t.Errorf("after SetEnv env = %v", got.Env)
		}
		if r := raw(); strings.Contains(r, password) {
			t.Errorf("stored env after SetEnv = %s, holds the password", r)
		}
		list, err := svc.Listing(t.Context(), teamID)
		if err != nil || len(list.Servers) != 1 || list.Servers[0].Env["RCON_PASSWORD"] != password {
			t.Errorf("Listing = %v, %v", list, err)
		}
		waitFor(t, svc, teamID, sv.ID, "installed", func(s servers.Server) bool { return s.Status == servers.StatusOffline && s.InstallError == nil })
	})
}

// TestDeleteHooks: a delete runs the OnDelete hooks first; when it ends,
// whichever way, OnDeleteEnded runs once: after a failed hook with the
// server kept, after a good delete with its row and its files gone.
func TestDeleteHooks(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	svc := env.Service
	var calls []string
	failing := true
	svc.OnDelete(func(_ context.Context, id string) error {
		calls = append(calls, "delete "+id)
		if failing {
			return errors.New("the disk is read-only")
		}
		return nil
	})
	svc.OnDeleteEnded(func(id string) {
		_, err := svc.Get(context.Background(), teamID, id)
		_, statErr := os.Stat(env.Node.Root(id))
		calls = append(calls, fmt.Sprintf("ended %s (gone: %v, root gone: %v)", id, errors.Is(err, servers.ErrNotFound), os.IsNotExist(statErr)))
	})
	sv := newTestServer(t, svc, teamID)
	if err := svc.Delete(t.Context(), teamID, sv.ID); err == nil {
		t.Fatal("Delete succeeded with a failing hook")
	}
	failing = false
	if err := svc.Delete(t.Context(), teamID, sv.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"delete " + sv.ID, "ended " + sv.ID + " (gone: false, root gone: false)",
		"delete " + sv.ID, "ended " + sv.ID + " (gone: true, root gone: true)",
	}
	if !slices.Equal(calls, want) {
		t.Errorf("hooks ran %q, want %q", calls, want)
	}
}

// TestCreateLeavesNoGhost: a create whose root cannot be made leaves no
// server behind (before, the row was committed first: a server without a
// root, and a retry made a second one).
func TestCreateLeavesNoGhost(t *testing.T) {
	db := storetest.SQLite(t)
	teamID := team(t, db)
	env := serverstest.New(t, db, serverstest.Options{})
	roots := filepath.Dir(env.Node.Root("x"))
	if err := os.RemoveAll(roots); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roots, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Service.Create(t.Context(), teamID, servers.NewServer{Name: "s", Software: "kiln-test", MemoryMB: 512, DiskMB: 1024}); err == nil {
		t.Fatal("Create succeeded without a place for its root")
	}
	var n int
	if err := db.Read().QueryRowContext(t.Context(), `SELECT count(*) FROM servers WHERE team_id = $1`, teamID).Scan(&n); err != nil || n != 0 {
		t.Errorf("servers after the failed create: %d, %v; want none", n, err)
	}
}
