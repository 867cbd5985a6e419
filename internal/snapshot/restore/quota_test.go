package restore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
)

func TestRestoreQuota(t *testing.T) {
	tr := enginetest.NewTree(t)
	tr.File("big", tr.Random(3<<20), 0o644)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	dst := t.TempDir()
	before := enginetest.State(t, dst)
	acct := quota.NewAccount(1<<20, enginetest.Names())
	r, err := acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	_, err = Run(t.Context(), enginetest.OpenRoot(t, dst), r, store, res.ManifestKey, Options{})
	if !errors.Is(err, files.ErrQuota) {
		t.Fatalf("Restore over the limit: %v, want files.ErrQuota", err)
	}
	if d := enginetest.DiffState(before, enginetest.State(t, dst)); d != "" {
		t.Errorf("a refused restore changed the tree:\n%s", d)
	}

	// Within the limit: the change is what the tree now costs.
	acct = quota.NewAccount(1<<30, enginetest.Names())
	r, err = acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(t.Context(), enginetest.OpenRoot(t, dst), r, store, res.ManifestKey, Options{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, want := r.Change(), quota.Cost(3<<20); got != want {
		t.Errorf("reservation change = %d, want %d", got, want)
	}
	r.Commit()
	if got, _ := quota.Usage(dst); got != quota.Cost(3<<20) {
		t.Errorf("the root costs %d after the restore, want %d", got, quota.Cost(3<<20))
	}

	// Over the same tree with 1 MiB free (3 used of 4): the file stays in
	// place, nothing needs reserving.
	acct = quota.NewAccount(4<<20, enginetest.Names())
	acct.Adjust(quota.Cost(3 << 20))
	r, err = acct.Reserve(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	out, err := Run(t.Context(), enginetest.OpenRoot(t, dst), r, store, res.ManifestKey, Options{})
	if err != nil || out.Kept != 1 {
		t.Fatalf("Restore over an equal tree near the limit = %+v, %v; want the file kept", out, err)
	}
	if r.Change() != 0 {
		t.Errorf("reservation change = %d, want 0", r.Change())
	}
	// Its content changed (same size): it must be staged, and 3 MiB do
	// not fit in the 1 MiB free; refused, the tree as it was.
	f, err := os.OpenFile(filepath.Join(dst, "big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("changed"), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before = enginetest.State(t, dst)
	if _, err := Run(t.Context(), enginetest.OpenRoot(t, dst), r, store, res.ManifestKey, Options{}); !errors.Is(err, files.ErrQuota) {
		t.Errorf("Restore of a changed file over the limit: %v, want files.ErrQuota", err)
	}
	if d := enginetest.DiffState(before, withoutStaging(enginetest.State(t, dst))); d != "" {
		t.Errorf("a refused restore changed the tree:\n%s", d)
	}
	if left, _ := filepath.Glob(filepath.Join(dst, restorePrefix+"*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
