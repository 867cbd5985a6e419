package restore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/engine/enginetest"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

func TestHostileManifests(t *testing.T) {
	store := enginetest.NewStore(t)
	good := enginetest.PutChunk(t, store, []byte("good content"))
	liar := enginetest.PutLiar(t, store)
	// A chunk that is not zstd at all.
	junk := manifest.ChunkRef{Sum: sha256.Sum256([]byte("junk")), Len: 4}
	if _, err := store.Put(t.Context(), manifest.ChunkKey("", junk.Sum), bytes.NewReader([]byte("junk")), 4); err != nil {
		t.Fatal(err)
	}
	missing := manifest.ChunkRef{Sum: sha256.Sum256([]byte("never stored")), Len: 12}

	file := func(p string, chunks ...manifest.ChunkRef) manifest.Entry {
		en := manifest.Entry{Kind: manifest.KindFile, Path: p, Mode: 0o644}
		for _, c := range chunks {
			en.Extents = append(en.Extents, manifest.Extent{Chunk: c, Len: c.Len})
			en.Size += c.Len
		}
		return en
	}
	dir := func(p string) manifest.Entry { return manifest.Entry{Kind: manifest.KindDir, Path: p, Mode: 0o755} }
	link := func(p, target string) manifest.Entry {
		return manifest.Entry{Kind: manifest.KindLink, Path: p, Target: target}
	}

	tests := []struct {
		name    string
		entries []manifest.Entry
		want    error
	}{
		{"dot dot", []manifest.Entry{file("..", good)}, manifest.ErrInvalid},
		{"dot dot inside", []manifest.Entry{dir("a"), file("a/../../etc", good)}, manifest.ErrInvalid},
		{"absolute", []manifest.Entry{file("/etc/passwd", good)}, manifest.ErrInvalid},
		{"unclean", []manifest.Entry{dir("a"), file("a//b", good)}, manifest.ErrInvalid},
		{"dot", []manifest.Entry{dir(".")}, manifest.ErrInvalid},
		{"empty path", []manifest.Entry{file("", good)}, manifest.ErrInvalid},
		{"kiln temporary name", []manifest.Entry{file(".kiln-tmp-x", good)}, manifest.ErrInvalid},
		{"duplicate", []manifest.Entry{file("a", good), file("a", good)}, manifest.ErrInvalid},
		{"duplicate directory", []manifest.Entry{dir("a"), file("a/x", good), dir("a")}, manifest.ErrInvalid},
		{"out of order", []manifest.Entry{file("b", good), file("a", good)}, manifest.ErrInvalid},
		{"under a file", []manifest.Entry{file("a", good), file("a/b", good)}, manifest.ErrInvalid},
		{"under a link", []manifest.Entry{link("a", "d"), dir("d"), file("a/b", good)}, manifest.ErrInvalid},
		{"parent missing", []manifest.Entry{file("x/y", good)}, manifest.ErrInvalid},
		{"link out", []manifest.Entry{link("l", "../outside")}, manifest.ErrInvalid},
		{"link absolute", []manifest.Entry{link("l", "/etc/passwd")}, manifest.ErrInvalid},
		{"link out from below", []manifest.Entry{dir("d"), link("d/l", "../../x")}, manifest.ErrInvalid},
		{"link dot dot after a name", []manifest.Entry{dir("d"), link("d/l", "x/../y")}, manifest.ErrInvalid},
		{"link through a link", []manifest.Entry{link("self", "."), link("x", "self/..")}, manifest.ErrInvalid},
		{"sizes do not add up", []manifest.Entry{{Kind: manifest.KindFile, Path: "a", Size: 99, Extents: []manifest.Extent{{Chunk: good, Len: good.Len}}}}, manifest.ErrInvalid},
		{"extent beyond its chunk", []manifest.Entry{{Kind: manifest.KindFile, Path: "a", Size: good.Len, Extents: []manifest.Extent{{Chunk: good, Off: 1, Len: good.Len}}}}, manifest.ErrInvalid},
		{"chunk too large", []manifest.Entry{{Kind: manifest.KindFile, Path: "a", Size: 1, Extents: []manifest.Extent{{Chunk: manifest.ChunkRef{Len: engine.MaxChunk + 1}, Len: 1}}}}, manifest.ErrInvalid},
		{"chunk shorter than said", []manifest.Entry{{Kind: manifest.KindFile, Path: "a", Size: 1, Extents: []manifest.Extent{{Chunk: manifest.ChunkRef{Sum: good.Sum, Len: good.Len + 1}, Len: 1}}}}, engine.ErrCorruptChunk},
		{"chunk that lies", []manifest.Entry{file("a", good), file("b", liar)}, engine.ErrCorruptChunk},
		{"chunk that is not zstd", []manifest.Entry{file("a", junk)}, engine.ErrCorruptChunk},
		{"chunk missing", []manifest.Entry{file("a", missing)}, blob.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := enginetest.NewTree(t)
			tr.File("world/level.dat", []byte("the old world"), 0o644)
			tr.File("a", []byte("old a"), 0o644)
			tr.StampDirs()
			before := enginetest.State(t, tr.Dir)
			key := enginetest.PutManifest(t, store, uuid.NewString(), tc.entries...)
			_, err := Run(t.Context(), enginetest.OpenRoot(t, tr.Dir), enginetest.Unlimited(t), store, key, Options{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore = %v, want %v", err, tc.want)
			}
			if d := enginetest.DiffState(before, enginetest.State(t, tr.Dir)); d != "" {
				t.Errorf("a refused restore changed the tree:\n%s", d)
			}
		})
	}
}

// TestCorruptManifests: a manifest damaged after it was written is refused
// whole, before anything is written.
func TestCorruptManifests(t *testing.T) {
	store := enginetest.NewStore(t)
	good := enginetest.PutChunk(t, store, []byte("good content"))
	encode := func(space string) *bytes.Buffer {
		var raw bytes.Buffer
		enc, err := manifest.NewEncoder(&raw, manifest.Header{Space: space})
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range []manifest.Entry{
			{Kind: manifest.KindDir, Path: "d", Mode: 0o755},
			{Kind: manifest.KindFile, Path: "d/f", Mode: 0o644, Size: good.Len, Extents: []manifest.Extent{{Chunk: good, Len: good.Len}}},
		} {
			if err := enc.Add(&en); err != nil {
				t.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		return &raw
	}
	raw := encode("")
	plain, err := decompress(raw.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	recompress := func(b []byte) []byte { return enginetest.Encoder(t).EncodeAll(b, nil) }
	flip := func(i int) []byte {
		b := bytes.Clone(plain)
		b[i] ^= 1
		return recompress(b)
	}
	tests := []struct {
		name string
		blob []byte
	}{
		{"empty", nil},
		{"not zstd", []byte("KILNSNAP")},
		{"truncated", raw.Bytes()[:raw.Len()/2]},
		{"truncated before the end", recompress(plain[:len(plain)-40])},
		{"checksum", flip(len(plain) - 1)},
		{"content", flip(len(plain) - 40)},
		{"magic", flip(0)},
		{"version", recompress(append([]byte("KILNSNAP\x04"), plain[9:]...))},
		// A chunk space is a directory of the store: one that could leave
		// chunks/ is refused, as is one too long.
		{"space with a slash", encode("../manifests").Bytes()},
		{"space too long", encode(strings.Repeat("a", manifest.MaxSpaceLen+1)).Bytes()},
		{"trailing data", recompress(append(bytes.Clone(plain), 0))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := enginetest.NewTree(t)
			tr.File("a", []byte("old a"), 0o644)
			before := enginetest.State(t, tr.Dir)
			key := manifest.Key(uuid.NewString())
			if _, err := store.Put(t.Context(), key, bytes.NewReader(tc.blob), int64(len(tc.blob))); err != nil {
				t.Fatal(err)
			}
			_, err := Run(t.Context(), enginetest.OpenRoot(t, tr.Dir), enginetest.Unlimited(t), store, key, Options{})
			if !errors.Is(err, manifest.ErrInvalid) {
				t.Fatalf("Restore = %v, want manifest.ErrInvalid", err)
			}
			if d := enginetest.DiffState(before, enginetest.State(t, tr.Dir)); d != "" {
				t.Errorf("a refused restore changed the tree:\n%s", d)
			}
		})
	}
	// The undamaged one restores.
	key := manifest.Key(uuid.NewString())
	if _, err := store.Put(t.Context(), key, bytes.NewReader(raw.Bytes()), int64(raw.Len())); err != nil {
		t.Fatal(err)
	}
	run(t, enginetest.OpenRoot(t, t.TempDir()), store, key, Options{})
}

func decompress(b []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(b, nil)
}

// FuzzManifest: whatever a manifest holds, reading and checking it ends in
// entries or an error, never a panic or an unbounded allocation.
func FuzzManifest(f *testing.F) {
	var raw bytes.Buffer
	enc, err := manifest.NewEncoder(&raw, manifest.Header{})
	if err != nil {
		f.Fatal(err)
	}
	for _, en := range []manifest.Entry{
		{Kind: manifest.KindDir, Path: "d", Mode: 0o755, Mtime: 1},
		{Kind: manifest.KindFile, Path: "d/f", Mode: 0o644, Size: 3, Extents: []manifest.Extent{{Chunk: manifest.ChunkRef{Len: 5}, Off: 1, Len: 3}}},
		{Kind: manifest.KindLink, Path: "d/l", Target: "f"},
	} {
		_ = enc.Add(&en)
	}
	_ = enc.Close()
	plain, err := decompress(raw.Bytes())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(plain)
	f.Add([]byte("KILNSNAP\x01\x00f\x02..\x00"))
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		f.Fatal(err)
	}
	defer zenc.Close()
	f.Fuzz(func(t *testing.T, plain []byte) {
		d, err := manifest.NewDecoder(bytes.NewReader(zenc.EncodeAll(plain, nil)))
		if err != nil {
			return
		}
		defer d.Close()
		v := manifest.NewValidator()
		var en manifest.Entry
		for range 1 << 16 {
			if err := d.Next(&en); err != nil {
				return
			}
			if err := v.Check(&en); err != nil {
				return
			}
		}
	})
}
