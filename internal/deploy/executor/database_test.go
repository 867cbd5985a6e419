package executor_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/executor"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/servers/serverstest"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// processEnv is what the game server process running in root really got.
func processEnv(t *testing.T, root string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if env := serverstest.ProcessEnv(root); env != nil {
			return env
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process runs in %s", root)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dbLogin logs in with the DB_* variables a server got.
func dbLogin(ctx context.Context, engine string, env map[string]string) error {
	var db *sql.DB
	if engine == dbservice.MariaDB {
		c := mysql.NewConfig()
		c.Net, c.Addr = "tcp", net.JoinHostPort(env["DB_HOST"], env["DB_PORT"])
		c.User, c.Passwd, c.DBName, c.Timeout = env["DB_USER"], env["DB_PASSWORD"], env["DB_NAME"], 5*time.Second
		conn, err := mysql.NewConnector(c)
		if err != nil {
			return err
		}
		db = sql.OpenDB(conn)
	} else {
		var err error
		if db, err = sql.Open("pgx", env["DB_URL"]+"?sslmode=disable"); err != nil {
			return err
		}
	}
	defer db.Close()
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS stats (player VARCHAR(16))`)
	return err
}

// TestDatabasesApplied: a network with a dbservice on a real PostgreSQL
// and a real MariaDB host. Without a host the run fails (capacity) naming
// the command that adds one; with one, the database is made, the attached
// server's process gets working credentials (and the server record none
// of them); moving the attachment restarts both servers with the
// variables moved; removing the dbservice drops the database and user.
func TestDatabasesApplied(t *testing.T) {
	for _, engine := range []string{dbservice.Postgres, dbservice.MariaDB} {
		t.Run(engine, func(t *testing.T) {
			hostDSN := storetest.PostgresAdminURL
			if engine == dbservice.MariaDB {
				hostDSN = storetest.MariaDBURL
			}
			dsn := hostDSN(t)
			storetest.Each(t, func(t *testing.T, db *store.DB) { testDatabasesApplied(t, db, engine, dsn) })
		})
	}
}

func testDatabasesApplied(t *testing.T, db *store.DB, engine, dsn string) {
	ctx := t.Context()
	box, err := secretbox.Load(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	dbs := dbservice.NewService(db, box, nil)
	e := newEnvWith(t, db, serverstest.Options{Servers: servers.Options{Injected: dbs}})
	e.startOpts(executor.Options{Owner: "inst_db", Databases: dbs})

	yaml := `version: 1
servers:
  lobby: {software: kiln-test, memory: 256M, disk: 1G}
  survival: {software: kiln-test, memory: 256M, disk: 1G}
dbservices:
  stats: {engine: ` + engine + `, attach: [lobby]}
`
	cfgID, r := e.apply("", yaml)
	got := e.wait(r.ID)
	if got.Status != runs.Failed || got.FailureClass != runs.FailCapacity || !strings.Contains(got.Error, "kiln admin dbhost add") {
		t.Fatalf("run without a host = %s %s %q; want failed, capacity, naming kiln admin dbhost add", got.Status, got.FailureClass, got.Error)
	}
	if got.Summary.Failed != 1 {
		t.Errorf("summary = %+v, want the dbservice failed", got.Summary)
	}
	if owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID); len(owned) != 0 {
		t.Errorf("servers made after the dbservice failed: %d, want 0 (skipped)", len(owned))
	}

	if _, err := dbs.AddHost(ctx, "h1", engine, dsn, ""); err != nil {
		t.Fatal(err)
	}
	stats := dbservice.Owner{ConfigurationID: cfgID, ResourceKey: "dbservice/stats"}
	t.Cleanup(func() { _ = dbs.Drop(context.Background(), e.teamID, stats) })
	_, r = e.apply(cfgID, yaml) // the same version, queued again
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Create != 3 {
		t.Fatalf("run with a host = %s %s %q, %+v; want succeeded creating 3", got.Status, got.FailureClass, got.Error, got.Summary)
	}
	made, err := dbs.Find(ctx, e.teamID, stats)
	if err != nil {
		t.Fatal(err)
	}
	owned, _ := e.srv.OwnedBy(ctx, e.teamID, cfgID)
	lobby, survival := owned["server/lobby"], owned["server/survival"]
	env := processEnv(t, e.srvEnv.Node.Root(lobby.ID))
	if env["DB_NAME"] != made.Name || env["DB_USER"] != made.User || env["DB_STATS_NAME"] != made.Name || env["DB_PORT"] == "" {
		t.Fatalf("lobby's process env has DB_NAME=%q DB_USER=%q DB_STATS_NAME=%q; want %s", env["DB_NAME"], env["DB_USER"], env["DB_STATS_NAME"], made.Name)
	}
	if err := dbLogin(ctx, engine, env); err != nil {
		t.Errorf("log in with lobby's credentials: %v", err)
	}
	if _, ok := processEnv(t, e.srvEnv.Node.Root(survival.ID))["DB_NAME"]; ok {
		t.Error("survival got database credentials without being attached")
	}
	for k := range lobby.Env {
		if strings.HasPrefix(k, "DB_") {
			t.Errorf("the server record carries %s (credentials must stay sealed)", k)
		}
	}

	// Attached to survival instead: both restarted, the credentials moved.
	lobbyPID := pidIn(t, e.srvEnv.Node.Root(lobby.ID))
	_, r = e.apply(cfgID, strings.Replace(yaml, "attach: [lobby]", "attach: [survival]", 1))
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Update != 3 {
		t.Fatalf("attach change = %s %q, %+v; want succeeded, 3 updates (dbservice, lobby, survival)", got.Status, got.Error, got.Summary)
	}
	if pid := pidIn(t, e.srvEnv.Node.Root(lobby.ID)); pid == lobbyPID {
		t.Error("lobby was not restarted when its database was detached")
	}
	if _, ok := processEnv(t, e.srvEnv.Node.Root(lobby.ID))["DB_NAME"]; ok {
		t.Error("lobby still has database credentials after being detached")
	}
	env = processEnv(t, e.srvEnv.Node.Root(survival.ID))
	if err := dbLogin(ctx, engine, env); err != nil || env["DB_NAME"] != made.Name {
		t.Errorf("survival's credentials (DB_NAME=%q): %v", env["DB_NAME"], err)
	}

	// Removed: survival restarted without it, the database dropped.
	_, r = e.apply(cfgID, strings.Split(yaml, "dbservices:")[0])
	if got = e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Delete != 1 || got.Summary.Update != 1 {
		t.Fatalf("dbservice removed = %s %q, %+v; want succeeded, 1 delete, 1 update", got.Status, got.Error, got.Summary)
	}
	if _, err := dbs.Find(ctx, e.teamID, stats); err == nil {
		t.Error("the dbservice's row is still there after its delete")
	}
	if err := dbLogin(ctx, engine, env); err == nil {
		t.Error("the dropped dbservice's credentials still log in")
	}
	if _, ok := processEnv(t, e.srvEnv.Node.Root(survival.ID))["DB_NAME"]; ok {
		t.Error("survival still has database credentials after the dbservice was removed")
	}
	if live, _ := e.dep.Live(ctx, e.teamID, cfgID); len(live) != 2 {
		t.Errorf("applied state = %v, want the 2 servers only", live)
	}
}

// pidIn is the pid of the process running in root.
func pidIn(t *testing.T, root string) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if cwd, err := os.Readlink(d + "/cwd"); err == nil && cwd == root {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

// TestDatabaseHostFailuresTold: a registered host that no longer answers,
// or no longer lets the admin in, fails the dbservice's step (class
// dependency) with a sentence: neither the run's error, nor the
// resource's, nor its log, nor the run's events name the admin role, the
// maintenance database or the host's address (the driver's message does;
// it goes to Kiln's log).
func TestDatabaseHostFailuresTold(t *testing.T) {
	for _, engine := range []string{dbservice.Postgres, dbservice.MariaDB} {
		t.Run(engine, func(t *testing.T) {
			dsn := storetest.PostgresAdminURL(t)
			if engine == dbservice.MariaDB {
				dsn = storetest.MariaDBURL(t)
			}
			real, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := l.Addr().String() // nothing listens there once closed
			l.Close()
			const role, maint = "kiln_admin_q7x", "kiln_maint_q7x"
			for _, tc := range []struct {
				name, host, want, logged string
			}{
				{"unreachable", closed, "database host unavailable", closed},
				{"login refused", real.Host, "database host refused Kiln's login", role},
			} {
				t.Run(tc.name, func(t *testing.T) {
					bad := *real
					bad.User, bad.Host, bad.Path = url.User(role), tc.host, "/"+maint
					if engine == dbservice.MariaDB {
						bad.Path = "/"
					}
					testHostFailureTold(t, storetest.SQLite(t), engine, dsn, bad.String(), tc.want, tc.logged,
						[]string{role, maint, tc.host, real.Host})
				})
			}
		})
	}
}

func testHostFailureTold(t *testing.T, db *store.DB, engine, dsn, bad, want, logged string, secret []string) {
	ctx := t.Context()
	box, err := secretbox.Load(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	dbs := dbservice.NewService(db, box, nil)
	e := newEnvWith(t, db, serverstest.Options{Servers: servers.Options{Injected: dbs}})
	var mu sync.Mutex
	var logBuf strings.Builder
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logBuf.Write(p)
	}), nil))
	e.startOpts(executor.Options{Owner: "inst_db", Databases: dbs, Log: log})
	h, err := dbs.AddHost(ctx, "h1", engine, dsn, "")
	if err != nil {
		t.Fatal(err)
	}
	// The host changes under Kiln: its admin DSN now names a port nothing
	// listens on, or a role the server does not know.
	sealed, err := box.Seal([]byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write().ExecContext(ctx, `UPDATE db_hosts SET dsn_sealed = $1 WHERE id = $2`, sealed, h.ID); err != nil {
		t.Fatal(err)
	}
	_, r := e.apply("", "version: 1\ndbservices:\n  stats: {engine: "+engine+"}\n")
	got := e.wait(r.ID)
	if got.Status != runs.Failed || got.FailureClass != runs.FailDependency || got.Error != "dbservice/stats: "+want {
		t.Fatalf("run = %s %s %q; want failed, dependency, %q", got.Status, got.FailureClass, got.Error, "dbservice/stats: "+want)
	}
	told := []string{got.Error}
	rs, err := e.q.Resources(ctx, e.teamID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rs {
		if res.Key == "dbservice/stats" && res.Error != want {
			t.Errorf("resource error = %q, want %q", res.Error, want)
		}
		told = append(append(told, res.Error), res.Log...)
	}
	evs, err := e.q.Events(ctx, e.teamID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		told = append(told, ev.Message, string(ev.Data))
	}
	for _, s := range told {
		for _, x := range secret {
			if strings.Contains(s, x) {
				t.Errorf("the team reads %q, which names %s", s, x)
			}
		}
	}
	// The operator finds the detail in the log.
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logBuf.String(), "step attempt failed") || !strings.Contains(logBuf.String(), logged) {
		t.Errorf("the log does not hold the detail (%s):\n%s", logged, logBuf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// adminLimit is the connection limit the host at dsn holds for user.
func adminLimit(t *testing.T, engine, dsn, user string) int {
	t.Helper()
	var admin *sql.DB
	q := `SELECT rolconnlimit FROM pg_roles WHERE rolname = $1`
	if engine == dbservice.MariaDB {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		c := mysql.NewConfig()
		c.Net, c.Addr, c.User = "tcp", u.Host, u.User.Username()
		c.Passwd, _ = u.User.Password()
		conn, err := mysql.NewConnector(c)
		if err != nil {
			t.Fatal(err)
		}
		admin = sql.OpenDB(conn)
		q = `SELECT max_user_connections FROM mysql.user WHERE user = ?`
	} else {
		var err error
		if admin, err = sql.Open("pgx", dsn); err != nil {
			t.Fatal(err)
		}
	}
	defer admin.Close()
	var limit int
	if err := admin.QueryRowContext(t.Context(), q, user).Scan(&limit); err != nil {
		t.Fatalf("read the connection limit of %s: %v", user, err)
	}
	return limit
}

// TestDatabaseMaxConnectionsApplied: a dbservice's max_connections is its
// user's connection limit on the host; changed, the run updates the
// dbservice alone (its attached server is not restarted) and the user's
// limit follows; removed, it is back to the default. Before, every user
// got 20 and the spec had no such field.
func TestDatabaseMaxConnectionsApplied(t *testing.T) {
	if spec.DefaultMaxConnections != dbservice.MaxConnections {
		t.Fatalf("the spec's default max_connections %d is not dbservice's %d", spec.DefaultMaxConnections, dbservice.MaxConnections)
	}
	for _, engine := range []string{dbservice.Postgres, dbservice.MariaDB} {
		t.Run(engine, func(t *testing.T) {
			dsn := storetest.PostgresAdminURL(t)
			if engine == dbservice.MariaDB {
				dsn = storetest.MariaDBURL(t)
			}
			db := storetest.SQLite(t)
			ctx := t.Context()
			box, err := secretbox.Load(t.TempDir(), "")
			if err != nil {
				t.Fatal(err)
			}
			dbs := dbservice.NewService(db, box, nil)
			e := newEnvWith(t, db, serverstest.Options{Servers: servers.Options{Injected: dbs}})
			e.startOpts(executor.Options{Owner: "inst_db", Databases: dbs})
			if _, err := dbs.AddHost(ctx, "h1", engine, dsn, ""); err != nil {
				t.Fatal(err)
			}
			yaml := func(extra string) string {
				return "version: 1\nservers:\n  lobby: {software: kiln-test, memory: 256M, disk: 1G, state: stopped}\n" +
					"dbservices:\n  stats:\n    engine: " + engine + "\n    attach: [lobby]\n" + extra
			}
			cfgID, r := e.apply("", yaml("    max_connections: 7\n"))
			if got := e.wait(r.ID); got.Status != runs.Succeeded || got.Summary.Create != 2 {
				t.Fatalf("first run = %s %q, %+v; want succeeded creating 2", got.Status, got.Error, got.Summary)
			}
			stats := dbservice.Owner{ConfigurationID: cfgID, ResourceKey: "dbservice/stats"}
			t.Cleanup(func() { _ = dbs.Drop(context.Background(), e.teamID, stats) })
			made, err := dbs.Find(ctx, e.teamID, stats)
			if err != nil {
				t.Fatal(err)
			}
			if got := adminLimit(t, engine, dsn, made.User); got != 7 {
				t.Errorf("connection limit after the first run = %d, want 7", got)
			}
			for _, c := range []struct {
				extra string
				want  int
			}{{"    max_connections: 12\n", 12}, {"", dbservice.MaxConnections}} {
				_, r := e.apply(cfgID, yaml(c.extra))
				got := e.wait(r.ID)
				if got.Status != runs.Succeeded || got.Summary.Update != 1 || got.Summary.Noop != 1 {
					t.Fatalf("run setting %q = %s %q, %+v; want succeeded, the dbservice updated, lobby unchanged", c.extra, got.Status, got.Error, got.Summary)
				}
				rs, _ := e.q.Resources(ctx, e.teamID, r.ID)
				for _, res := range rs {
					if res.Key == "dbservice/stats" && res.Action != "update" {
						t.Errorf("dbservice/stats: %s, want update", res.Action)
					}
				}
				if got := adminLimit(t, engine, dsn, made.User); got != c.want {
					t.Errorf("connection limit after setting %q = %d, want %d", c.extra, got, c.want)
				}
			}
		})
	}
}
