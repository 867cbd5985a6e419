package dbservice

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

func newService(t *testing.T, db *store.DB) (*Service, *secretbox.Box) {
	t.Helper()
	box, err := secretbox.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"team_a", "team_b"} {
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, 1)`, team, team); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Write().ExecContext(t.Context(), `INSERT INTO configurations (id, team_id, name, yaml, spec_hash, resource_count, created_at, updated_at)
			VALUES ($1, $2, 'net', '', '', 0, 1, 1)`, "cfg_"+team, team); err != nil {
			t.Fatal(err)
		}
	}
	return NewService(db, box, nil), box
}

// hostURLs are the admin DSNs of the test database servers, by engine
// (each skips loudly, or fails in CI, when its server is missing).
func hostURL(t *testing.T, engineName string) string {
	if engineName == MariaDB {
		return storetest.MariaDBURL(t)
	}
	return storetest.PostgresAdminURL(t)
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// login connects as a dbservice's user with the variables a server gets.
func login(ctx context.Context, engineName string, env map[string]string, prefix string) (*sql.DB, error) {
	if engineName == MariaDB {
		c := mysql.NewConfig()
		c.Net, c.Addr = "tcp", net.JoinHostPort(env[prefix+"HOST"], env[prefix+"PORT"])
		c.User, c.Passwd, c.DBName = env[prefix+"USER"], env[prefix+"PASSWORD"], env[prefix+"NAME"]
		c.Timeout = 5 * time.Second
		conn, err := mysql.NewConnector(c)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(conn)
		return db, db.PingContext(ctx)
	}
	u, err := url.Parse(env[prefix+"URL"])
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		return nil, err
	}
	return db, db.PingContext(ctx)
}

// exists reports whether the host has a database called name.
func exists(t *testing.T, engineName, dsn, name string) bool {
	t.Helper()
	db, err := engines[engineName].open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := `SELECT count(*) FROM pg_database WHERE datname = $1`
	if engineName == MariaDB {
		q = `SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?`
	}
	var n int
	if err := db.QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestHosts: registering checks the input and logs in first; the DSN is
// sealed at rest and never listed or quoted in an error; a host in use
// cannot be removed.
func TestHosts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		s, _ := newService(t, db)
		pg := storetest.PostgresAdminURL(t)

		_, err := s.AddHost(ctx, "Main", "oracle", "x", "nohost")
		ve, ok := errors.AsType[*validate.Error](err)
		if !ok || len(ve.Issues) != 3 {
			t.Fatalf("AddHost of bad input = %v, want 3 issues (name, engine, address)", err)
		}
		if _, err := s.AddHost(ctx, "main", Postgres, "mariadb://root@127.0.0.1:3306/", ""); err == nil || !strings.Contains(err.Error(), "postgres://") {
			t.Fatalf("a mariadb DSN for a postgres host = %v, want a sentence naming postgres://", err)
		}
		closed := "postgres://kiln:hunter2secret@" + closedPort(t) + "/postgres?sslmode=disable"
		_, err = s.AddHost(ctx, "down", Postgres, closed, "")
		if he, ok := errors.AsType[*HostError](err); !ok || he.Host != "down" {
			t.Fatalf("AddHost of an unreachable host = %v, want *HostError", err)
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Fatalf("the error quotes the DSN's password: %v", err)
		}

		h, err := s.AddHost(ctx, "main", Postgres, pg, "db.internal:5433")
		if err != nil {
			t.Fatal(err)
		}
		if h.Address != "db.internal:5433" || h.Engine != Postgres || !strings.HasPrefix(h.ID, "dbh_") {
			t.Errorf("host = %+v", h)
		}
		if _, err := s.AddHost(ctx, "main", Postgres, pg, ""); !errors.Is(err, ErrHostNameTaken) {
			t.Errorf("the same name again = %v, want ErrHostNameTaken", err)
		}
		var sealed string
		if err := db.Read().QueryRowContext(ctx, `SELECT dsn_sealed FROM db_hosts WHERE id = $1`, h.ID).Scan(&sealed); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sealed, "127.0.0.1") || strings.Contains(sealed, "postgres") {
			t.Errorf("the stored DSN is readable: %q", sealed)
		}
		list, err := s.Hosts(ctx)
		if err != nil || len(list) != 1 || list[0].Name != "main" || list[0].Services != 0 {
			t.Fatalf("Hosts = %+v, %v", list, err)
		}

		if _, err := s.Ensure(ctx, "team_a", Owner{"cfg_team_a", "dbservice/stats"}, Postgres, nil, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Drop(context.Background(), "team_a", Owner{"cfg_team_a", "dbservice/stats"}) })
		_, err = s.RemoveHost(ctx, "main")
		if ie, ok := errors.AsType[*HostInUseError](err); !ok || ie.Services != 1 {
			t.Fatalf("RemoveHost in use = %v, want *HostInUseError with 1", err)
		}
		if err := s.Drop(ctx, "team_a", Owner{"cfg_team_a", "dbservice/stats"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RemoveHost(ctx, h.ID); err != nil {
			t.Fatalf("RemoveHost by id = %v", err)
		}
		if _, err := s.RemoveHost(ctx, "main"); !errors.Is(err, ErrHostNotFound) {
			t.Errorf("RemoveHost again = %v, want ErrHostNotFound", err)
		}
	})
}

// TestDatabases, against a real PostgreSQL and a real MariaDB: a
// dbservice gets a database and a user on a host of its engine, found
// again (not made twice) by a second Ensure; the attached server's
// variables log in and can create tables; another dbservice's user
// cannot reach it; Drop removes both and a second Drop is a no-op.
func TestDatabases(t *testing.T) {
	for _, engineName := range []string{Postgres, MariaDB} {
		t.Run(engineName, func(t *testing.T) {
			dsn := hostURL(t, engineName)
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				ctx := t.Context()
				s, _ := newService(t, db)
				stats := Owner{"cfg_team_a", "dbservice/stats"}
				perms := Owner{"cfg_team_a", "dbservice/perms"}
				if _, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"lobby"}, 0); !errors.Is(err, ErrNoHost) {
					t.Fatalf("Ensure with no host = %v, want ErrNoHost", err)
				}
				if _, err := s.AddHost(ctx, "h1", engineName, dsn, ""); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = s.Drop(context.Background(), "team_a", stats)
					_ = s.Drop(context.Background(), "team_a", perms)
				})
				d, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"survival", "lobby"}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(d.Name, "kiln_stats_") || d.User != d.Name || fmt.Sprint(d.Attach) != "[lobby survival]" {
					t.Errorf("database = %+v", d)
				}
				again, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"lobby"}, 0)
				if err != nil || again.ID != d.ID || again.Name != d.Name || fmt.Sprint(again.Attach) != "[lobby]" {
					t.Fatalf("Ensure again = %+v, %v; want the same database, attached to lobby only", again, err)
				}
				if _, err := s.Ensure(ctx, "team_a", perms, engineName, []string{"lobby"}, 0); err != nil {
					t.Fatal(err)
				}

				env, err := s.InjectedEnv(ctx, "cfg_team_a", "server/lobby")
				if err != nil {
					t.Fatal(err)
				}
				// perms sorts before stats: its are the plain names.
				if env["DB_NAME"] != env["DB_PERMS_NAME"] || env["DB_STATS_NAME"] != d.Name || env["DB_USER"] == "" || len(env["DB_PASSWORD"]) != 32 {
					t.Errorf("env = %v", env)
				}
				host, port, _ := net.SplitHostPort(dsnAddress(t, engineName, dsn))
				if env["DB_STATS_HOST"] != host || env["DB_STATS_PORT"] != port {
					t.Errorf("DB_STATS_HOST/PORT = %s:%s, want %s:%s", env["DB_STATS_HOST"], env["DB_STATS_PORT"], host, port)
				}
				wantJDBC := "jdbc:" + map[string]string{Postgres: "postgresql", MariaDB: "mariadb"}[engineName] + "://" + net.JoinHostPort(host, port) + "/" + d.Name
				if env["DB_STATS_JDBC_URL"] != wantJDBC {
					t.Errorf("DB_STATS_JDBC_URL = %s, want %s", env["DB_STATS_JDBC_URL"], wantJDBC)
				}
				if e, err := s.InjectedEnv(ctx, "cfg_team_a", "server/survival"); err != nil || e != nil {
					t.Errorf("env of a server no dbservice is attached to = %v, %v; want none", e, err)
				}

				conn, err := login(ctx, engineName, env, "DB_STATS_")
				if err != nil {
					t.Fatalf("log in with the injected credentials: %v", err)
				}
				if _, err := conn.ExecContext(ctx, `CREATE TABLE kills (player VARCHAR(16), n INT)`); err != nil {
					t.Fatalf("create a table as the dbservice's user: %v", err)
				}
				if _, err := conn.ExecContext(ctx, `INSERT INTO kills VALUES ('alex', 3)`); err != nil {
					t.Fatal(err)
				}
				conn.Close()
				// The other dbservice's user cannot open this database.
				cross := map[string]string{}
				for k, v := range env {
					cross[k] = v
				}
				cross["DB_STATS_USER"], cross["DB_STATS_PASSWORD"] = env["DB_PERMS_USER"], env["DB_PERMS_PASSWORD"]
				u, _ := url.Parse(env["DB_STATS_URL"])
				u.User = url.UserPassword(env["DB_PERMS_USER"], env["DB_PERMS_PASSWORD"])
				cross["DB_STATS_URL"] = u.String()
				if c, err := login(ctx, engineName, cross, "DB_STATS_"); err == nil {
					c.Close()
					t.Errorf("perms' user opened stats' database")
				}

				if err := s.Drop(ctx, "team_a", stats); err != nil {
					t.Fatal(err)
				}
				if exists(t, engineName, dsn, d.Name) {
					t.Errorf("database %s still exists after Drop", d.Name)
				}
				if c, err := login(ctx, engineName, env, "DB_STATS_"); err == nil {
					c.Close()
					t.Errorf("stats' user still logs in after Drop")
				}
				if err := s.Drop(ctx, "team_a", stats); err != nil {
					t.Errorf("Drop again = %v, want nil", err)
				}
				if _, err := s.Find(ctx, "team_a", stats); !errors.Is(err, ErrNotFound) {
					t.Errorf("Find after Drop = %v, want ErrNotFound", err)
				}
				// Another team sees nothing of team_a's.
				if _, err := s.Find(ctx, "team_b", perms); !errors.Is(err, ErrNotFound) {
					t.Errorf("team_b finds team_a's dbservice: %v", err)
				}
			})
		})
	}
}

func dsnAddress(t *testing.T, engineName, dsn string) string {
	a, err := parseDSN(engineName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestHostUnreachable: a registered host that stops answering fails
// Ensure and Drop with *HostError (a run's dependency failure), and a
// failed Drop keeps the row for the next attempt.
func TestHostUnreachable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := t.Context()
		s, box := newService(t, db)
		pg := storetest.PostgresAdminURL(t)
		h, err := s.AddHost(ctx, "h1", Postgres, pg, "")
		if err != nil {
			t.Fatal(err)
		}
		o := Owner{"cfg_team_a", "dbservice/stats"}
		d, err := s.Ensure(ctx, "team_a", o, Postgres, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Point the host back at the cluster and drop what was made.
			sealed, _ := box.Seal([]byte(pg))
			_, _ = db.Write().ExecContext(context.Background(), `UPDATE db_hosts SET dsn_sealed = $1 WHERE id = $2`, sealed, h.ID)
			_ = s.Drop(context.Background(), "team_a", o)
		})
		sealed, _ := box.Seal([]byte("postgres://kiln:pw@" + closedPort(t) + "/postgres?sslmode=disable"))
		if _, err := db.Write().ExecContext(ctx, `UPDATE db_hosts SET dsn_sealed = $1 WHERE id = $2`, sealed, h.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ensure(ctx, "team_a", o, Postgres, nil, 0); !isHostError(err) {
			t.Errorf("Ensure on an unreachable host = %v, want *HostError", err)
		}
		if err := s.Drop(ctx, "team_a", o); !isHostError(err) {
			t.Errorf("Drop on an unreachable host = %v, want *HostError", err)
		}
		if got, err := s.Find(ctx, "team_a", o); err != nil || got.ID != d.ID {
			t.Errorf("after a failed Drop, Find = %+v, %v; want the row kept", got, err)
		}
	})
}

func isHostError(err error) bool {
	_, ok := errors.AsType[*HostError](err)
	return ok
}

// TestHostErrorsTold: a *HostError's sentence (what a team reads of a
// run's dependency failure) says what went wrong in a few words, and
// never what the driver says: the admin role, the maintenance database,
// the host's address. Its Error keeps that detail for the log.
func TestHostErrorsTold(t *testing.T) {
	db := storetest.SQLite(t)
	ctx := t.Context()
	s, box := newService(t, db)
	pg := storetest.PostgresAdminURL(t)
	admin, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// A role that may log in but not create roles: a statement refused.
	const weak, maint = "kiln_weak_admin_h4", "postgres"
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+weak+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP ROLE IF EXISTS `+weak) })
	u, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(weak)
	h, err := s.AddHost(ctx, "weak", Postgres, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	o := Owner{"cfg_team_a", "dbservice/stats"}
	_, err = s.Ensure(ctx, "team_a", o, Postgres, nil, 0)
	checkTold(t, "Ensure as a role that cannot create roles", err, "database host refused to create the database", "permission denied", u.Host, weak)

	closed := closedPort(t)
	sealed, _ := box.Seal([]byte("postgres://" + weak + "@" + closed + "/" + maint + "?sslmode=disable"))
	if _, err := db.Write().ExecContext(ctx, `UPDATE db_hosts SET dsn_sealed = $1 WHERE id = $2`, sealed, h.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.Ensure(ctx, "team_a", o, Postgres, nil, 0)
	checkTold(t, "Ensure on a host nothing answers for", err, "database host unavailable", closed, closed, weak, maint)
	err = s.Drop(ctx, "team_a", o)
	checkTold(t, "Drop on a host nothing answers for", err, "database host unavailable", closed, closed, weak, maint)
}

// checkTold checks that err is a *HostError telling want, with detail in
// its Error, and none of secret in its sentence.
func checkTold(t *testing.T, call string, err error, want, detail string, secret ...string) {
	t.Helper()
	he, ok := errors.AsType[*HostError](err)
	if !ok {
		t.Errorf("%s = %v, want a *HostError", call, err)
		return
	}
	if he.Public() != want {
		t.Errorf("%s: Public() = %q, want %q", call, he.Public(), want)
	}
	for _, x := range secret {
		if strings.Contains(he.Public(), x) {
			t.Errorf("%s: Public() = %q names %s", call, he.Public(), x)
		}
	}
	if !strings.Contains(err.Error(), detail) {
		t.Errorf("%s: Error() = %q, want the detail %q in it", call, err, detail)
	}
}

// TestNativeHash: MariaDB's own PASSWORD('password').
func TestNativeHash(t *testing.T) {
	if got := nativeHash("password"); got != "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19" {
		t.Errorf("nativeHash(password) = %s", got)
	}
	if got := grantName(`kiln_a%b\c`); got != `kiln\_a\%b\\c` {
		t.Errorf("grantName = %s", got)
	}
}

// TestDatabaseUserLimits: a dbservice's user holds at most MaxConnections
// connections at once; its password reaches the host as a verifier or a
// hash only (the user logs in with it all the same); and on MariaDB its
// grant is for its database alone: before, the "_" of the name was a
// wildcard, and the user could create kilnXstats_… and keep it after the
// dbservice was dropped.
func TestDatabaseUserLimits(t *testing.T) {
	for _, engineName := range []string{Postgres, MariaDB} {
		t.Run(engineName, func(t *testing.T) {
			dsn := hostURL(t, engineName)
			db := storetest.SQLite(t)
			ctx := t.Context()
			s, _ := newService(t, db)
			stats := Owner{"cfg_team_a", "dbservice/stats"}
			if _, err := s.AddHost(ctx, "h1", engineName, dsn, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Drop(context.Background(), "team_a", stats) })
			d, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"lobby"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			admin, err := engines[engineName].open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			env, err := s.InjectedEnv(ctx, "cfg_team_a", "server/lobby")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := login(ctx, engineName, env, "DB_STATS_")
			if err != nil {
				t.Fatalf("log in with the injected password: %v", err)
			}
			defer conn.Close()
			switch engineName {
			case Postgres:
				var limit int
				var verifier string
				if err := admin.QueryRowContext(ctx, `SELECT rolconnlimit, rolpassword FROM pg_authid WHERE rolname = $1`, d.User).Scan(&limit, &verifier); err != nil {
					t.Fatal(err)
				}
				if limit != MaxConnections || !strings.HasPrefix(verifier, "SCRAM-SHA-256$4096:") {
					t.Errorf("role: connection limit %d, password %.20s…; want %d and a SCRAM verifier", limit, verifier, MaxConnections)
				}
			case MariaDB:
				var limit int
				if err := admin.QueryRowContext(ctx, `SELECT max_user_connections FROM mysql.user WHERE user = ?`, d.User).Scan(&limit); err != nil {
					t.Fatal(err)
				}
				if limit != MaxConnections {
					t.Errorf("max_user_connections = %d, want %d", limit, MaxConnections)
				}
				lookalike := strings.Replace(d.Name, "_", "X", 1)
				if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+myIdent(lookalike)); err == nil {
					_, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+myIdent(lookalike))
					t.Errorf("the dbservice's user created %s: its grant matches other names", lookalike)
				}
			}
			// Past the limit, a connection is refused.
			conns := make([]*sql.Conn, 0, MaxConnections)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			conn.SetMaxOpenConns(MaxConnections + 1)
			var refused error
			for range MaxConnections + 1 {
				c, err := conn.Conn(ctx)
				if err == nil {
					err = c.PingContext(ctx)
				}
				if err != nil {
					refused = err
					break
				}
				conns = append(conns, c)
			}
			if refused == nil || len(conns) > MaxConnections {
				t.Errorf("%d connections at once, none refused; want at most %d", len(conns), MaxConnections)
			}
		})
	}
}

// connLimit is the connection limit the host holds for user.
func connLimit(t *testing.T, admin *sql.DB, engineName, user string) int {
	t.Helper()
	q := `SELECT rolconnlimit FROM pg_roles WHERE rolname = $1`
	if engineName == MariaDB {
		q = `SELECT max_user_connections FROM mysql.user WHERE user = ?`
	}
	var limit int
	if err := admin.QueryRowContext(t.Context(), q, user).Scan(&limit); err != nil {
		t.Fatalf("read the connection limit of %s: %v", user, err)
	}
	return limit
}

// TestDatabaseMaxConnections: a dbservice's own connection limit is the
// user's when it is made (a connection past it is refused), and a later
// Ensure with another limit changes it on the user that exists (ALTER
// ROLE, ALTER USER); 0 is the default, MaxConnections. Before, every user
// got MaxConnections whatever was asked.
func TestDatabaseMaxConnections(t *testing.T) {
	for _, engineName := range []string{Postgres, MariaDB} {
		t.Run(engineName, func(t *testing.T) {
			dsn := hostURL(t, engineName)
			db := storetest.SQLite(t)
			ctx := t.Context()
			s, _ := newService(t, db)
			stats := Owner{"cfg_team_a", "dbservice/stats"}
			if _, err := s.AddHost(ctx, "h1", engineName, dsn, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Drop(context.Background(), "team_a", stats) })
			const limit = 3
			d, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"lobby"}, limit)
			if err != nil {
				t.Fatal(err)
			}
			admin, err := engines[engineName].open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if got := connLimit(t, admin, engineName, d.User); got != limit {
				t.Fatalf("connection limit after Ensure(%d) = %d", limit, got)
			}
			env, err := s.InjectedEnv(ctx, "cfg_team_a", "server/lobby")
			if err != nil {
				t.Fatal(err)
			}
			pool, err := login(ctx, engineName, env, "DB_STATS_")
			if err != nil {
				t.Fatalf("log in: %v", err)
			}
			defer pool.Close()
			pool.SetMaxOpenConns(limit + 1)
			var conns []*sql.Conn
			var refused error
			for range limit + 1 {
				c, err := pool.Conn(ctx)
				if err == nil {
					err = c.PingContext(ctx)
				}
				if err != nil {
					refused = err
					break
				}
				conns = append(conns, c)
			}
			for _, c := range conns {
				c.Close()
			}
			if refused == nil || len(conns) != limit {
				t.Errorf("%d connections at once (refused: %v); want %d, the next refused", len(conns), refused, limit)
			}
			for _, c := range []struct{ ask, want int }{{8, 8}, {0, MaxConnections}} {
				if _, err := s.Ensure(ctx, "team_a", stats, engineName, []string{"lobby"}, c.ask); err != nil {
					t.Fatal(err)
				}
				if got := connLimit(t, admin, engineName, d.User); got != c.want {
					t.Errorf("connection limit after Ensure(%d) = %d, want %d", c.ask, got, c.want)
				}
			}
		})
	}
}
