package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

//go:embed migrations
var migrations embed.FS

// Dialect names the database engine behind a DB.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Options says which database to open.
type Options struct {
	// URL is a postgres:// or postgresql:// URL; empty means SQLite in DataDir.
	URL string
	// DataDir holds kiln.db when URL is empty.
	DataDir string
}

// LogValue keeps the URL (and its password) out of logs.
func (o Options) LogValue() slog.Value {
	if o.URL == "" {
		return slog.GroupValue(slog.String("engine", "sqlite"), slog.String("data_dir", o.DataDir))
	}
	return slog.GroupValue(slog.String("engine", "postgres"))
}

// DB is an open, migrated database.
type DB struct {
	dialect Dialect
	write   *sql.DB // SQLite: one connection; PostgreSQL: the pool
	read    *sql.DB // SQLite: query_only pool; PostgreSQL: same as write
}

// ErrMigrate wraps a failure to bring the schema up to date.
var ErrMigrate = errors.New("migrate database")

// Open connects, applies pending migrations and returns the DB.
func Open(ctx context.Context, opts Options) (*DB, error) {
	var db *DB
	var err error
	if opts.URL == "" {
		db, err = openSQLite(ctx, opts.DataDir, true)
	} else {
		db, err = openPostgres(ctx, opts.URL)
	}
	if err != nil {
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// IsPostgresURL reports whether s names a PostgreSQL database.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// openSQLite opens dataDir/kiln.db. With create, it makes the directory
// and the file as needed and switches the file to WAL (which persists in
// the file); without, it changes nothing about an existing file, so that
// looking at a file that is no Kiln database leaves it as it was.
func openSQLite(ctx context.Context, dataDir string, create bool) (*DB, error) {
	if dataDir == "" {
		return nil, errors.New("open sqlite: no data directory")
	}
	path := filepath.Join(dataDir, "kiln.db")
	// busy_timeout first so that switching to WAL can wait for another process.
	base := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(5000)"
	if create {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("open sqlite: create data directory: %w", err)
		}
		base += "&_pragma=journal_mode(WAL)"
	}
	base += "&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite writer: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite reader: %w", err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	r.SetConnMaxIdleTime(5 * time.Minute)
	return &DB{dialect: SQLite, write: w, read: r}, nil
}

func openPostgres(ctx context.Context, dsn string) (*DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		// pgx errors may quote the DSN's host and user but never the password.
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return &DB{dialect: Postgres, write: db, read: db}, nil
}

func (db *DB) migrate(ctx context.Context) error {
	p, err := db.provider(true)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	return nil
}

// provider is goose's view of this engine's embedded migrations; locked
// adds PostgreSQL's session lock (for Up).
func (db *DB) provider(locked bool) (*goose.Provider, error) {
	dir, dialect := "migrations/sqlite", goose.DialectSQLite3
	var opts []goose.ProviderOption
	if db.dialect == Postgres {
		dir, dialect = "migrations/postgres", goose.DialectPostgres
		if locked {
			locker, err := lock.NewPostgresSessionLocker()
			if err != nil {
				return nil, err
			}
			opts = append(opts, goose.WithSessionLocker(locker))
		}
	}
	fsys, err := fs.Sub(migrations, dir)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(dialect, db.write, fsys, opts...)
}

// Dialect tells which engine this is.
func (db *DB) Dialect() Dialect { return db.dialect }

// Read is the pool for queries that change nothing.
func (db *DB) Read() *sql.DB { return db.read }

// Write is the pool for statements that change rows. On SQLite it holds one
// connection, so keep work done while holding it short.
func (db *DB) Write() *sql.DB { return db.write }

// Tx runs fn in a write transaction and commits when fn returns nil.
func (db *DB) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Ping checks that the database answers (for /readyz).
func (db *DB) Ping(ctx context.Context) error {
	if err := db.read.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Close closes every pool.
func (db *DB) Close() error {
	err := db.write.Close()
	if db.read != db.write {
		err = errors.Join(err, db.read.Close())
	}
	return err
}

// Now is the timestamp format of every *_at column: Unix milliseconds.
func Now() int64 { return time.Now().UnixMilli() }
