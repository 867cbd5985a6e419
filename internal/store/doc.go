// Package store opens Kiln's database and keeps its schema current.
//
// Two engines sit behind one *DB: SQLite (the zero-configuration default, a
// file in the data directory) and PostgreSQL (several replicas sharing one
// database). Domain packages own their queries and write them once, in the
// SQL both engines accept: `$1`-style placeholders numbered in order of first
// appearance (SQLite binds `$N` as a named parameter in that order), integer
// Unix-millisecond timestamps, TEXT ids, `INSERT … ON CONFLICT`, `RETURNING`.
// Where the engines truly differ a query branches on DB.Dialect.
//
// Decisions:
//   - SQLite through modernc.org/sqlite (pure Go: one static binary, no cgo),
//     in WAL mode with synchronous=NORMAL, a 5 s busy timeout and foreign
//     keys on. Writes go through a pool of exactly one connection whose
//     transactions start with BEGIN IMMEDIATE, so writers queue in Go instead
//     of failing with SQLITE_BUSY; reads use a separate query_only pool.
//     Other processes (`kiln admin …` while `kiln serve` runs) share the file
//     through SQLite's own locking and the busy timeout.
//   - PostgreSQL through pgx v5's database/sql driver, so domain code sees one
//     *sql.DB type for both engines.
//   - Migrations are plain SQL files embedded per engine and applied at open
//     with pressly/goose v3's Provider (no global state); on PostgreSQL a
//     session advisory lock keeps two starting replicas from racing.
//   - Only kiln serve creates and migrates (Open). kiln admin uses
//     OpenExisting, which creates nothing (no data directory, no SQLite
//     file, not even goose's version table) and refuses a database without
//     Kiln's schema (ErrNoSchema) or with migrations pending
//     (*SchemaBehindError): run in the wrong directory, admin used to
//     create an empty database and answer "team not found". A schema newer
//     than the binary is accepted, since migrations only add.
//
// It must never hold domain logic, and it never logs DSNs (they carry
// passwords): Options implements LogValue to redact them.
package store
