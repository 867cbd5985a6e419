package engine

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/blob"
)

var noTime time.Time

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }

func mustEncoder(t testing.TB) *zstd.Encoder {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enc.Close() })
	return enc
}

// chunkOf returns the stored (compressed) form of data and its ref.
func chunkOf(t testing.TB, data []byte) ([]byte, chunkRef) {
	t.Helper()
	return mustEncoder(t).EncodeAll(data, nil), chunkRef{sum: sha256Sum(data), len: int64(len(data))}
}

// putChunk stores data as a chunk and returns its ref.
func putChunk(t testing.TB, store blob.Store, data []byte) chunkRef {
	t.Helper()
	comp, ref := chunkOf(t, data)
	if _, err := store.Put(t.Context(), chunkKey("", ref.sum), bytes.NewReader(comp), int64(len(comp))); err != nil {
		t.Fatal(err)
	}
	return ref
}

// putLiar stores a chunk under the name of content it does not hold
// ("what it holds!!!!!" under the SHA-256 of "what the name says").
func putLiar(t testing.TB, store blob.Store) chunkRef {
	t.Helper()
	liar := chunkRef{sum: sha256Sum([]byte("what the name says")), len: int64(len("what it holds!!!!!"))}
	comp, _ := chunkOf(t, []byte("what it holds!!!!!"))
	if _, err := store.Put(t.Context(), chunkKey("", liar.sum), bytes.NewReader(comp), int64(len(comp))); err != nil {
		t.Fatal(err)
	}
	return liar
}

func TestHostileManifests(t *testing.T) {
	store := newStore(t)
	good := putChunk(t, store, []byte("good content"))
	liar := putLiar(t, store)
	// A chunk that is not zstd at all.
	junk := chunkRef{sum: sha256Sum([]byte("junk")), len: 4}
	if _, err := store.Put(t.Context(), chunkKey("", junk.sum), bytes.NewReader([]byte("junk")), 4); err != nil {
		t.Fatal(err)
	}
	missing := chunkRef{sum: sha256Sum([]byte("never stored")), len: 12}

	file := func(p string, chunks ...chunkRef) entry {
		en := entry{kind: kindFile, path: p, mode: 0o644}
		for _, c := range chunks {
			en.extents = append(en.extents, extent{chunk: c, len: c.len})
			en.size += c.len
		}
		return en
	}
	dir := func(p string) entry { return entry{kind: kindDir, path: p, mode: 0o755} }
	link := func(p, target string) entry { return entry{kind: kindLink, path: p, target: target} }

	tests := []struct {
		name    string
		entries []entry
		want    error
	}{
		{"dot dot", []entry{file("..", good)}, ErrInvalidManifest},
		{"dot dot inside", []entry{dir("a"), file("a/../../etc", good)}, ErrInvalidManifest},
		{"absolute", []entry{file("/etc/passwd", good)}, ErrInvalidManifest},
		{"unclean", []entry{dir("a"), file("a//b", good)}, ErrInvalidManifest},
		{"dot", []entry{dir(".")}, ErrInvalidManifest},
		{"empty path", []entry{file("", good)}, ErrInvalidManifest},
		{"kiln temporary name", []entry{file(".kiln-tmp-x", good)}, ErrInvalidManifest},
		{"duplicate", []entry{file("a", good), file("a", good)}, ErrInvalidManifest},
		{"duplicate directory", []entry{dir("a"), file("a/x", good), dir("a")}, ErrInvalidManifest},
		{"out of order", []entry{file("b", good), file("a", good)}, ErrInvalidManifest},
		{"under a file", []entry{file("a", good), file("a/b", good)}, ErrInvalidManifest},
		{"under a link", []entry{link("a", "d"), dir("d"), file("a/b", good)}, ErrInvalidManifest},
		{"parent missing", []entry{file("x/y", good)}, ErrInvalidManifest},
		{"link out", []entry{link("l", "../outside")}, ErrInvalidManifest},
		{"link absolute", []entry{link("l", "/etc/passwd")}, ErrInvalidManifest},
		{"link out from below", []entry{dir("d"), link("d/l", "../../x")}, ErrInvalidManifest},
		{"link dot dot after a name", []entry{dir("d"), link("d/l", "x/../y")}, ErrInvalidManifest},
		{"link through a link", []entry{link("self", "."), link("x", "self/..")}, ErrInvalidManifest},
		{"sizes do not add up", []entry{{kind: kindFile, path: "a", size: 99, extents: []extent{{chunk: good, len: good.len}}}}, ErrInvalidManifest},
		{"extent beyond its chunk", []entry{{kind: kindFile, path: "a", size: good.len, extents: []extent{{chunk: good, off: 1, len: good.len}}}}, ErrInvalidManifest},
		{"chunk too large", []entry{{kind: kindFile, path: "a", size: 1, extents: []extent{{chunk: chunkRef{len: maxChunk + 1}, len: 1}}}}, ErrInvalidManifest},
		{"chunk shorter than said", []entry{{kind: kindFile, path: "a", size: 1, extents: []extent{{chunk: chunkRef{sum: good.sum, len: good.len + 1}, len: 1}}}}, ErrCorruptChunk},
		{"chunk that lies", []entry{file("a", good), file("b", liar)}, ErrCorruptChunk},
		{"chunk that is not zstd", []entry{file("a", junk)}, ErrCorruptChunk},
		{"chunk missing", []entry{file("a", missing)}, blob.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t)
			tr.file("world/level.dat", []byte("the old world"), 0o644)
			tr.file("a", []byte("old a"), 0o644)
			tr.stampDirs()
			before := state(t, tr.dir)
			key := putManifest(t, store, uuid.NewString(), tc.entries...)
			_, err := Restore(t.Context(), openRoot(t, tr.dir), unlimited(t), store, key, RestoreOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore = %v, want %v", err, tc.want)
			}
			if d := diffState(before, state(t, tr.dir)); d != "" {
				t.Errorf("a refused restore changed the tree:\n%s", d)
			}
		})
	}
}

// TestCorruptManifests: a manifest damaged after it was written is refused
// whole, before anything is written.
func TestCorruptManifests(t *testing.T) {
	store := newStore(t)
	good := putChunk(t, store, []byte("good content"))
	manifest := func(space string) *bytes.Buffer {
		var raw bytes.Buffer
		enc, err := newEncoder(&raw, 0, space)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range []entry{
			{kind: kindDir, path: "d", mode: 0o755},
			{kind: kindFile, path: "d/f", mode: 0o644, size: good.len, extents: []extent{{chunk: good, len: good.len}}},
		} {
			if err := enc.add(&en); err != nil {
				t.Fatal(err)
			}
		}
		if err := enc.close(); err != nil {
			t.Fatal(err)
		}
		return &raw
	}
	raw := manifest("")
	plain, err := decompress(raw.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	recompress := func(b []byte) []byte { return mustEncoder(t).EncodeAll(b, nil) }
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
		{"space with a slash", manifest("../manifests").Bytes()},
		{"space too long", manifest(strings.Repeat("a", maxSpaceLen+1)).Bytes()},
		{"trailing data", recompress(append(bytes.Clone(plain), 0))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t)
			tr.file("a", []byte("old a"), 0o644)
			before := state(t, tr.dir)
			key := ManifestKey(uuid.NewString())
			if _, err := store.Put(t.Context(), key, bytes.NewReader(tc.blob), int64(len(tc.blob))); err != nil {
				t.Fatal(err)
			}
			_, err := Restore(t.Context(), openRoot(t, tr.dir), unlimited(t), store, key, RestoreOptions{})
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("Restore = %v, want ErrInvalidManifest", err)
			}
			if d := diffState(before, state(t, tr.dir)); d != "" {
				t.Errorf("a refused restore changed the tree:\n%s", d)
			}
		})
	}
	// The undamaged one restores.
	key := ManifestKey(uuid.NewString())
	if _, err := store.Put(t.Context(), key, bytes.NewReader(raw.Bytes()), int64(raw.Len())); err != nil {
		t.Fatal(err)
	}
	restore(t, openRoot(t, t.TempDir()), store, key, RestoreOptions{})
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
	enc, err := newEncoder(&raw, 0, "")
	if err != nil {
		f.Fatal(err)
	}
	for _, en := range []entry{
		{kind: kindDir, path: "d", mode: 0o755, mtime: 1},
		{kind: kindFile, path: "d/f", mode: 0o644, size: 3, extents: []extent{{chunk: chunkRef{len: 5}, off: 1, len: 3}}},
		{kind: kindLink, path: "d/l", target: "f"},
	} {
		_ = enc.add(&en)
	}
	_ = enc.close()
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
		d, err := newDecoder(bytes.NewReader(zenc.EncodeAll(plain, nil)))
		if err != nil {
			return
		}
		defer d.close()
		v := newValidator()
		var en entry
		for range 1 << 16 {
			if err := d.next(&en); err != nil {
				return
			}
			if err := v.check(&en); err != nil {
				return
			}
		}
	})
}
