package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// ErrNoSchema says that OpenExisting found no Kiln database: no SQLite
// file, or a database without Kiln's schema.
var ErrNoSchema = errors.New("no Kiln schema")

// SchemaBehindError says that the database's schema is older than this
// binary's migrations: kiln serve of this version has not run on it yet.
type SchemaBehindError struct {
	Have, Want int64 // migration versions
}

func (e *SchemaBehindError) Error() string {
	return fmt.Sprintf("database schema is at version %d, this kiln needs %d", e.Have, e.Want)
}

// OpenExisting opens a database that kiln serve has already set up,
// creating and migrating nothing (for kiln admin): a missing SQLite file
// is not created, nor is the data directory. It returns ErrNoSchema when
// there is no Kiln database there and *SchemaBehindError when migrations
// are pending. A newer schema than this binary knows is accepted:
// migrations only add, so an older kiln admin still works next to a newer
// kiln serve.
func OpenExisting(ctx context.Context, opts Options) (*DB, error) {
	var db *DB
	var err error
	if opts.URL == "" {
		if opts.DataDir == "" {
			return nil, errors.New("open sqlite: no data directory")
		}
		path := filepath.Join(opts.DataDir, "kiln.db")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, ErrNoSchema
		} else if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		db, err = openSQLite(ctx, opts.DataDir, false)
	} else {
		db, err = openPostgres(ctx, opts.URL)
	}
	if err != nil {
		return nil, err
	}
	have, want, err := db.SchemaVersion(ctx)
	switch {
	case err != nil:
	case have == 0:
		err = ErrNoSchema
	case have < want:
		err = &SchemaBehindError{Have: have, Want: want}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// SchemaVersion returns the newest migration applied to the database (0
// when none, or when it has no migration table) and the newest this binary
// embeds. It creates nothing.
func (db *DB) SchemaVersion(ctx context.Context) (have, want int64, err error) {
	p, err := db.provider(false)
	if err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	sources := p.ListSources()
	if len(sources) > 0 {
		want = sources[len(sources)-1].Version
	}
	// goose creates its table when asked for versions: look first.
	q := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'goose_db_version'`
	if db.dialect == Postgres {
		q = `SELECT count(*) FROM (SELECT to_regclass('goose_db_version') AS t) AS r WHERE t IS NOT NULL`
	}
	var n int
	if err := db.read.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return 0, want, fmt.Errorf("schema version: %w", err)
	}
	if n == 0 {
		return 0, want, nil
	}
	have, _, err = p.GetVersions(ctx)
	if err != nil {
		return 0, want, fmt.Errorf("schema version: %w", err)
	}
	return have, want, nil
}

// Location names the database for people: the SQLite file's absolute
// path, or the PostgreSQL URL without its password and parameters.
func (o Options) Location() string {
	if o.URL == "" {
		path := filepath.Join(o.DataDir, "kiln.db")
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return path
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return "PostgreSQL (unparsable URL)"
	}
	out := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		out.User = url.User(u.User.Username())
	}
	return out.String()
}
