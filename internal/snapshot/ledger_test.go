package snapshot

import (
	"database/sql"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// TestScanAllIterationError: a query the database fails on its second
// row (after handing out the first) is an error for scanAll, on both
// engines, not a list of the one row read — what the collector's loops
// (abandoned snapshots, unreferenced chunks) took for all the rows
// before: they never asked rows.Err.
func TestScanAllIterationError(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		// SQLite's abs() of the smallest integer and PostgreSQL's
		// division by zero fail as that row is computed.
		q := `SELECT abs(v) FROM (SELECT 1 AS v UNION ALL SELECT -9223372036854775808) AS t`
		if db.Dialect() == store.Postgres {
			q = `SELECT 1 / v FROM (VALUES (1), (0)) AS t(v)`
		}
		rows, err := db.Read().QueryContext(t.Context(), q)
		if err != nil {
			t.Fatalf("the query failed before its first row: %v", err)
		}
		got, err := scanAll(rows, func(rows *sql.Rows) (n int64, err error) { return n, rows.Scan(&n) })
		if err == nil {
			t.Fatalf("scanAll = %v, nil; want the second row's error", got)
		}
		t.Logf("scanAll: %v", err)

		// A query that does not fail reads every row.
		rows, err = db.Read().QueryContext(t.Context(), `SELECT v FROM (SELECT 1 AS v UNION ALL SELECT 2) AS t ORDER BY v`)
		if err != nil {
			t.Fatal(err)
		}
		got, err = scanAll(rows, func(rows *sql.Rows) (n int64, err error) { return n, rows.Scan(&n) })
		if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
			t.Errorf("scanAll = %v, %v; want [1 2]", got, err)
		}
	})
}
