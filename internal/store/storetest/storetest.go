package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/store"
)

// EnvPostgresURL names the variable holding the test cluster's URL.
const EnvPostgresURL = "KILN_TEST_POSTGRES_URL"

// Each runs fn once per engine, as subtests "sqlite" and "postgres".
func Each(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// SQLite opens a migrated SQLite database in a temporary directory.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(t.Context(), store.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Postgres opens a migrated database in a fresh schema of the test cluster.
func Postgres(t *testing.T) *store.DB {
	t.Helper()
	u := PostgresURL(t)
	db, err := store.Open(t.Context(), store.Options{URL: u})
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// PostgresURL creates an empty schema in the test cluster, drops it when the
// test ends, and returns a URL whose search_path points at it (for tests
// that start `kiln serve` processes themselves).
func PostgresURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv(EnvPostgresURL)
	if base == "" {
		if os.Getenv("KILN_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s is not set but KILN_REQUIRE_POSTGRES=1: the PostgreSQL suite must run", EnvPostgresURL)
		}
		t.Skipf("SKIP POSTGRES SUITE: %s is not set (scripts/test starts a cluster and sets it)", EnvPostgresURL)
	}
	schema := "t_" + strings.ToLower(ids.RandomBase62(16))
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`CREATE SCHEMA "%s"`, schema)); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`DROP SCHEMA "%s" CASCADE`, schema)); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvPostgresURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// EnvMariaDBURL names the variable holding the test MariaDB's admin URL
// (mariadb://root@127.0.0.1:PORT/, set by scripts/test).
const EnvMariaDBURL = "KILN_TEST_MARIADB_URL"

// MariaDBURL returns the test MariaDB's admin URL, or skips the test with
// one loud line when there is none (fails under KILN_REQUIRE_MARIADB=1).
func MariaDBURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(EnvMariaDBURL)
	if u == "" {
		if os.Getenv("KILN_REQUIRE_MARIADB") == "1" {
			t.Fatalf("%s is not set but KILN_REQUIRE_MARIADB=1: the MariaDB suite must run", EnvMariaDBURL)
		}
		t.Skipf("SKIP MARIADB SUITE: %s is not set (scripts/test starts a MariaDB and sets it)", EnvMariaDBURL)
	}
	return u
}

// PostgresAdminURL is the test cluster's own URL (a superuser), for tests
// that register it as a database host; it skips as PostgresURL does.
func PostgresAdminURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv(EnvPostgresURL)
	if base == "" {
		if os.Getenv("KILN_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s is not set but KILN_REQUIRE_POSTGRES=1: the PostgreSQL suite must run", EnvPostgresURL)
		}
		t.Skipf("SKIP POSTGRES SUITE: %s is not set (scripts/test starts a cluster and sets it)", EnvPostgresURL)
	}
	return base
}
