package engine_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// TestExportRoundTrip: the tar stream of a snapshot, extracted by GNU tar,
// is the tree that was snapshotted (content, modes, mtimes to the
// nanosecond, links, empty directories), and the same bytes whatever the
// number of workers.
func TestExportRoundTrip(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Fatalf("GNU tar is needed to check the export: %v", err)
	}
	tr := enginetest.Fixture(t)
	want := enginetest.State(t, tr.Dir)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})

	ex, err := engine.OpenExport(t.Context(), store, res.ManifestKey, "")
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
	if out, err := exec.Command(tarBin, "-x", "-p", "-f", archive, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	if d := enginetest.DiffState(want, enginetest.State(t, dst)); d != "" {
		t.Errorf("the extracted export differs from the tree:\n%s", d)
	}
}

// TestExportRefuses: a manifest a restore would refuse is refused before
// anything is written; a chunk that is not what its name says, or is
// missing, stops the stream with the error.
func TestExportRefuses(t *testing.T) {
	store := enginetest.NewStore(t)
	good := enginetest.PutChunk(t, store, []byte("good content"))
	liar := enginetest.PutLiar(t, store)
	missing := manifest.ChunkRef{Sum: sha256.Sum256([]byte("never stored")), Len: 12}
	file := func(p string, c manifest.ChunkRef) manifest.Entry {
		return manifest.Entry{Kind: manifest.KindFile, Path: p, Mode: 0o644, Size: c.Len, Extents: []manifest.Extent{{Chunk: c, Len: c.Len}}}
	}

	if _, err := engine.OpenExport(t.Context(), store, enginetest.PutManifest(t, store, "dotdot", file("../etc/passwd", good)), ""); !errors.Is(err, manifest.ErrInvalid) {
		t.Errorf("a path out of the root: OpenExport = %v, want manifest.ErrInvalid", err)
	}
	if _, err := engine.OpenExport(t.Context(), store, enginetest.PutManifest(t, store, "link", manifest.Entry{Kind: manifest.KindLink, Path: "l", Target: "/etc"}), ""); !errors.Is(err, manifest.ErrInvalid) {
		t.Errorf("an absolute link: OpenExport = %v, want manifest.ErrInvalid", err)
	}
	if _, err := engine.OpenExport(t.Context(), store, "manifests/nope", ""); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("no manifest: OpenExport = %v, want blob.ErrNotFound", err)
	}
	for _, c := range []struct {
		name, id string
		chunk    manifest.ChunkRef
		want     error
	}{
		{"a chunk that lies", "liar", liar, engine.ErrCorruptChunk},
		{"a missing chunk", "missing", missing, blob.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := enginetest.PutManifest(t, store, c.id, file("a", good), file("b", c.chunk), file("c", good))
			ex, err := engine.OpenExport(t.Context(), store, key, "")
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
	tr := enginetest.Fixture(t)
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	ex, err := engine.OpenExport(t.Context(), store, res.ManifestKey, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10_000, 20 << 20} {
		if err := ex.WriteTar(t.Context(), &failingWriter{n: n}, 2); !errors.Is(err, errWriterFull) {
			t.Errorf("after %d bytes: WriteTar = %v, want the writer's error", n, err)
		}
	}
}

// TestExportPath: an export narrowed to a path holds that path and what is
// under it, and nothing else (a sibling sharing its prefix included); a
// path the snapshot does not hold is files.ErrNotFound.
func TestExportPath(t *testing.T) {
	tr := enginetest.Fixture(t)
	tr.File("world/region2/r.9.9.mca", []byte("a sibling with the same prefix"), 0o644)
	tr.StampDirs()
	store := enginetest.NewStore(t)
	res := enginetest.Create(t, enginetest.OpenRoot(t, tr.Dir), store, engine.CreateOptions{})
	names := func(only string) ([]string, *engine.Export) {
		t.Helper()
		ex, err := engine.OpenExport(t.Context(), store, res.ManifestKey, only)
		if err != nil {
			t.Fatalf("OpenExport(%q): %v", only, err)
		}
		var buf bytes.Buffer
		if err := ex.WriteTar(t.Context(), &buf, 2); err != nil {
			t.Fatalf("WriteTar(%q): %v", only, err)
		}
		var out []string
		rd := tar.NewReader(&buf)
		for {
			h, err := rd.Next()
			if err == io.EOF {
				return out, ex
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h.Name)
		}
	}
	got, ex := names("world/region")
	want := []string{"world/region/", "world/region/r.0.0.mca", "world/region/r.0.1.mca", "world/region/r.1.0.mca"}
	if !slices.Equal(got, want) {
		t.Errorf("world/region: %q, want %q", got, want)
	}
	if ex.Files != 3 || ex.Dirs != 1 || ex.SizeBytes != 30<<20+3*engine.MaxChunk {
		t.Errorf("world/region: %d files, %d dirs, %d bytes", ex.Files, ex.Dirs, ex.SizeBytes)
	}
	if got, _ := names("server.properties"); !slices.Equal(got, []string{"server.properties"}) {
		t.Errorf("server.properties: %q", got)
	}
	if got, _ := names("dangling"); !slices.Equal(got, []string{"dangling"}) {
		t.Errorf("a link: %q", got)
	}
	for _, missing := range []string{"world/regio", "nope", "server.properties/x"} {
		if _, err := engine.OpenExport(t.Context(), store, res.ManifestKey, missing); !errors.Is(err, files.ErrNotFound) {
			t.Errorf("OpenExport(%q) = %v, want files.ErrNotFound", missing, err)
		}
	}
}
