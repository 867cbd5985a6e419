package engine

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
)

// TestExportRoundTrip: the tar stream of a snapshot, extracted by GNU tar,
// is the tree that was snapshotted (content, modes, mtimes to the
// nanosecond, links, empty directories), and the same bytes whatever the
// number of workers.
func TestExportRoundTrip(t *testing.T) {
	tar, err := exec.LookPath("tar")
	if err != nil {
		t.Fatalf("GNU tar is needed to check the export: %v", err)
	}
	tr := fixture(t)
	want := state(t, tr.dir)
	store := newStore(t)
	res := create(t, openRoot(t, tr.dir), store, CreateOptions{})

	ex, err := OpenExport(t.Context(), store, res.ManifestKey)
	if err != nil {
		t.Fatalf("OpenExport: %v", err)
	}
	if ex.Files != res.Files || ex.Dirs != res.Dirs || ex.Symlinks != res.Symlinks || ex.SizeBytes != res.SizeBytes {
		t.Errorf("Export counts %d files, %d dirs, %d links, %d bytes; Create %d, %d, %d, %d",
			ex.Files, ex.Dirs, ex.Symlinks, ex.SizeBytes, res.Files, res.Dirs, res.Symlinks, res.SizeBytes)
	}
	var one, many bytes.Buffer
	if err := ex.WriteTar(t.Context(), &one, 1); err != nil {
		t.Fatalf("WriteTar, 1 worker: %v", err)
	}
	if err := ex.WriteTar(t.Context(), &many, 8); err != nil {
		t.Fatalf("WriteTar, 8 workers: %v", err)
	}
	if !bytes.Equal(one.Bytes(), many.Bytes()) {
		t.Errorf("1 worker wrote %d bytes, 8 workers %d other bytes", one.Len(), many.Len())
	}
	archive := filepath.Join(t.TempDir(), "export.tar")
	if err := os.WriteFile(archive, one.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if out, err := exec.Command(tar, "-x", "-p", "-f", archive, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	if d := diffState(want, state(t, dst)); d != "" {
		t.Errorf("the extracted export differs from the tree:\n%s", d)
	}
}

// TestExportRefuses: a manifest a restore would refuse is refused before
// anything is written; a chunk that is not what its name says, or is
// missing, stops the stream with the error.
func TestExportRefuses(t *testing.T) {
	store := newStore(t)
	good := putChunk(t, store, []byte("good content"))
	liar := putLiar(t, store)
	missing := chunkRef{sum: sha256Sum([]byte("never stored")), len: 12}
	file := func(p string, c chunkRef) entry {
		return entry{kind: kindFile, path: p, mode: 0o644, size: c.len, extents: []extent{{chunk: c, len: c.len}}}
	}

	if _, err := OpenExport(t.Context(), store, putManifest(t, store, "dotdot", file("../etc/passwd", good))); !errors.Is(err, ErrInvalidManifest) {
		t.Errorf("a path out of the root: OpenExport = %v, want ErrInvalidManifest", err)
	}
	if _, err := OpenExport(t.Context(), store, putManifest(t, store, "link", entry{kind: kindLink, path: "l", target: "/etc"})); !errors.Is(err, ErrInvalidManifest) {
		t.Errorf("an absolute link: OpenExport = %v, want ErrInvalidManifest", err)
	}
	if _, err := OpenExport(t.Context(), store, "manifests/nope"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("no manifest: OpenExport = %v, want blob.ErrNotFound", err)
	}
	for _, c := range []struct {
		name, id string
		chunk    chunkRef
		want     error
	}{
		{"a chunk that lies", "liar", liar, ErrCorruptChunk},
		{"a missing chunk", "missing", missing, blob.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := putManifest(t, store, c.id, file("a", good), file("b", c.chunk), file("c", good))
			ex, err := OpenExport(t.Context(), store, key)
			if err != nil {
				t.Fatalf("OpenExport: %v", err)
			}
			var out bytes.Buffer
			if err := ex.WriteTar(t.Context(), &out, 2); !errors.Is(err, c.want) {
				t.Errorf("WriteTar = %v, want %v", err, c.want)
			}
			if bytes.Contains(out.Bytes(), []byte("what it holds")) {
				t.Errorf("the liar's bytes were written")
			}
		})
	}
}

// failingWriter takes n bytes, then fails.
type failingWriter struct{ n int }

var errWriterFull = errors.New("the client went away")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errWriterFull
	}
	w.n -= len(p)
	return len(p), nil
}

// TestExportWriterFails: a writer that fails (a client gone) ends the
// export with its own error, not the cancel it causes, and ends the
// workers.
func TestExportWriterFails(t *testing.T) {
	tr := fixture(t)
	store := newStore(t)
	res := create(t, openRoot(t, tr.dir), store, CreateOptions{})
	ex, err := OpenExport(t.Context(), store, res.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10_000, 20 << 20} {
		if err := ex.WriteTar(t.Context(), &failingWriter{n: n}, 2); !errors.Is(err, errWriterFull) {
			t.Errorf("after %d bytes: WriteTar = %v, want the writer's error", n, err)
		}
	}
}
