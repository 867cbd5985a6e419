package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

func TestOpenExisting(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		// Nothing there: refused, and nothing created.
		if _, err := store.OpenExisting(t.Context(), store.Options{DataDir: dir}); !errors.Is(err, store.ErrNoSchema) {
			t.Fatalf("OpenExisting(missing dir) = %v, want ErrNoSchema", err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("OpenExisting created the data dir: %v", err)
		}
		// An empty file (what an older kiln admin left behind) is no database.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kiln.db"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := store.OpenExisting(t.Context(), store.Options{DataDir: dir}); !errors.Is(err, store.ErrNoSchema) {
			t.Fatalf("OpenExisting(empty file) = %v, want ErrNoSchema", err)
		}
		if fi, err := os.Stat(filepath.Join(dir, "kiln.db")); err != nil || fi.Size() != 0 {
			t.Fatalf("kiln.db after the refusal: %v, %v; want it left empty", fi, err)
		}
		openExisting(t, store.Options{DataDir: dir})
	})
	t.Run("postgres", func(t *testing.T) {
		openExisting(t, store.Options{URL: storetest.PostgresURL(t)})
	})
}

// openExisting runs on a database without Kiln's schema.
func openExisting(t *testing.T, opts store.Options) {
	ctx := t.Context()
	if _, err := store.OpenExisting(ctx, opts); !errors.Is(err, store.ErrNoSchema) {
		t.Fatalf("OpenExisting(no schema) = %v, want ErrNoSchema", err)
	}
	db, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	have, want, err := db.SchemaVersion(ctx)
	if err != nil || have != want || want < 6 {
		t.Fatalf("SchemaVersion after Open = %d, %d, %v; want equal, at least 6", have, want, err)
	}
	ex, err := store.OpenExisting(ctx, opts)
	if err != nil {
		t.Fatalf("OpenExisting(migrated) = %v", err)
	}
	if err := ex.Ping(ctx); err != nil {
		t.Error(err)
	}
	ex.Close()
	// A schema missing this binary's newest migration is refused.
	if _, err := db.Write().ExecContext(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, want); err != nil {
		t.Fatal(err)
	}
	_, err = store.OpenExisting(ctx, opts)
	behind, ok := errors.AsType[*store.SchemaBehindError](err)
	if !ok || behind.Have != want-1 || behind.Want != want {
		t.Errorf("OpenExisting(one migration behind) = %v, want SchemaBehindError{%d, %d}", err, want-1, want)
	}
}

func TestLocation(t *testing.T) {
	abs, _ := filepath.Abs("kd")
	for _, c := range []struct {
		name string
		opts store.Options
		want string
	}{
		{"sqlite", store.Options{DataDir: "kd"}, filepath.Join(abs, "kiln.db")},
		{"postgres without password", store.Options{URL: "postgres://kiln@db.example:5432/kiln"}, "postgres://kiln@db.example:5432/kiln"},
		{"password and parameters left out", store.Options{URL: "postgresql://kiln:s3cret@db.example/kiln?sslmode=require&password=x"}, "postgresql://kiln@db.example/kiln"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.opts.Location(); got != c.want {
				t.Errorf("Location() = %q, want %q", got, c.want)
			}
		})
	}
}
