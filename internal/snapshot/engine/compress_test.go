package engine

import (
	"bytes"
	"compress/zlib"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/blob"
)

// regionLike is n bytes shaped as a Minecraft region file's chunks are
// (and worldgen's): records of zlib over part noise, part a repeated
// 64-byte pattern, each padded with zeros to 4 KiB sectors. Where the
// levels differ: the fastest one steps over the short periodic runs that
// end each zlib stream.
func regionLike(tr *tree, n int) []byte {
	var out bytes.Buffer
	for out.Len() < n {
		size := 6000 + int(tr.random(2)[0])*94
		raw := append(tr.random(size/4), bytes.Repeat(tr.random(64), (size-size/4)/64+1)...)[:size]
		var z bytes.Buffer
		zw, _ := zlib.NewWriterLevel(&z, 6)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		out.Write([]byte{byte(z.Len() >> 24), byte(z.Len() >> 16), byte(z.Len() >> 8), byte(z.Len()), 2})
		out.Write(z.Bytes())
		out.Write(make([]byte, (4096-(z.Len()+5)%4096)%4096))
	}
	return out.Bytes()[:n]
}

// TestCompressionLevels: every level round-trips a tree byte for byte;
// on region-like data each harder level stores fewer bytes; chunks made
// at one level dedupe with another's (names are of the uncompressed
// bytes); an unknown level is refused before anything is stored.
func TestCompressionLevels(t *testing.T) {
	tr := fixture(t)
	tr.file("world/region/r.2.2.mca", regionLike(tr, 12<<20), 0o644)
	tr.stampDirs()
	want := state(t, tr.dir)
	stored := map[Compression]int64{}
	levels := Compressions()
	for i, level := range levels {
		t.Run(string(level), func(t *testing.T) {
			store := newStore(t)
			res := create(t, openRoot(t, tr.dir), store, CreateOptions{Compression: level})
			stored[level] = res.StoredBytes
			dst := t.TempDir()
			restore(t, openRoot(t, dst), store, res.ManifestKey, RestoreOptions{})
			if d := diffState(want, state(t, dst)); d != "" {
				t.Errorf("restored tree differs:\n%s", d)
			}
			// Another level into the same store uploads no chunk.
			other := levels[(i+1)%len(levels)]
			again := create(t, openRoot(t, tr.dir), store, CreateOptions{Compression: other})
			if again.NewChunks != 0 {
				t.Errorf("a snapshot at %s after one at %s uploaded %d chunks, want 0", other, level, again.NewChunks)
			}
		})
	}
	t.Logf("stored bytes: %v", stored)
	if !(stored[CompressionDefault] < stored[CompressionFastest] && stored[CompressionBetter] <= stored[CompressionDefault]) {
		t.Errorf("stored bytes by level = %v, want fastest > default >= better", stored)
	}

	for _, name := range []string{"FASTEST", "Default", ""} {
		if _, err := ParseCompression(name); err != nil {
			t.Errorf("ParseCompression(%q) = %v", name, err)
		}
	}
	store := newStore(t)
	_, err := Create(t.Context(), openRoot(t, tr.dir), store, CreateOptions{Compression: "zip"})
	if err == nil || !strings.Contains(err.Error(), `snapshot compression "zip": want one of fastest, default, better`) {
		t.Errorf("Create at level zip = %v, want the levels named", err)
	}
	var keys []string
	err = store.List(t.Context(), "", func(i blob.Info) error {
		keys = append(keys, i.Key)
		return nil
	})
	if err != nil || len(keys) != 0 {
		t.Errorf("the store after a refused level holds %v (%v), want nothing", keys, err)
	}
}
