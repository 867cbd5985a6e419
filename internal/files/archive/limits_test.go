package archive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// isLimit checks a refusal of the whole archive with message msg.
func isLimit(msg string) func(error) bool {
	return func(err error) bool {
		ee, ok := errors.AsType[*EntryError](err)
		return ok && ee.Name == "" && err.Error() == msg && errors.Is(err, ErrUnsupported)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// zipZstdEntry is a zip with one entry compressed with zstd (method 93)
// holding data as is (the frame is not checked by the writer).
func zipZstdEntry(t *testing.T, name string, frame []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: name, Method: zstd.ZipMethodWinZip, CompressedSize64: uint64(len(frame)), UncompressedSize64: 1}
	h.SetMode(0o644)
	w, err := zw.CreateRaw(h)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(frame)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// limitCases are archives declaring more memory than Decompress gives a
// decoder, or links that would lead out through other links: part of the
// hostile corpus (TestHostileArchives).
func limitCases() []hostileCase {
	level := func(t *testing.T) string { return string(tarOf(t, file("world/level.dat", "level"))) }
	return []hostileCase{
		{name: "xz dictionary of 1.5 GiB", archive: "a.tar.xz", golden: "xz-dict-1.5g.tar.xz",
			build: func(t *testing.T) []byte { return xzWithDict(37, level(t)) },
			check: isLimit("the archive's xz dictionary is 1.5 GiB; at most 64 MiB is allowed")},
		{name: "xz dictionary of 4 GiB in a second stream", archive: "a.txz",
			build: func(t *testing.T) []byte {
				return append(xzWithDict(0, level(t)[:512]), xzWithDict(40, level(t)[512:])...)
			},
			check: isLimit("the archive's xz dictionary is 4 GiB; at most 64 MiB is allowed")},
		{name: "xz --lzma2=dict=96MiB", archive: "a.tar.xz",
			build: func(t *testing.T) []byte { return readTestdata(t, "xz/dict96m.xz") },
			check: isLimit("the archive's xz dictionary is 96 MiB; at most 64 MiB is allowed")},
		{name: "zstd window of 2 GiB", archive: "a.tar.zst", golden: "zstd-window-2g.tar.zst",
			build: func(t *testing.T) []byte { return zstdFrameOf(21<<3, level(t)) },
			check: isLimit("the archive's zstd window is 2 GiB; at most 128 MiB is allowed")},
		{name: "zstd single segment of 1 TiB", archive: "a.tzst",
			build: func(t *testing.T) []byte { return zstdSingleSegment(1<<40, level(t)) },
			check: isLimit("the archive's zstd window is 1 TiB; at most 128 MiB is allowed")},
		{name: "zstd --long=28 (256 MiB window)", archive: "a.tar.zst",
			build: func(t *testing.T) []byte { return readTestdata(t, "long28.tar.zst") },
			check: isLimit("the archive's zstd window is 256 MiB; at most 128 MiB is allowed")},
		{name: "zstd zip entry with a 2 GiB window", archive: "a.zip",
			build: func(t *testing.T) []byte { return zipZstdEntry(t, "x", zstdFrameOf(21<<3, "x")) },
			check: isLimit("the archive's zstd window is 2 GiB; at most 128 MiB is allowed")},
		{name: "zip64 end record declaring 10 million entries", archive: "a.zip", golden: "zip-eocd-10m.zip",
			build: func(t *testing.T) []byte {
				return zipAsZip64(t, zipOf(t, zipItem{"ok.txt", 0o644, "fine"}), 10_000_000)
			},
			check: isLimit("the archive's central directory declares 10000000 entries; at most 1000000 are allowed")},
		{name: "zip directory of 4 GiB", archive: "a.jar",
			build: func(t *testing.T) []byte {
				z := zipAsZip64(t, zipOf(t, zipItem{"ok.txt", 0o644, "fine"}), 1)
				binary.LittleEndian.PutUint64(z[len(z)-zipDirEndLen-zipDir64LocLen-zipDir64EndLen+40:], 4<<30)
				return z
			},
			check: isLimit("the archive's central directory is 4 GiB; at most 192 MiB is allowed")},
		{name: "tar PAX header of 2 MiB", archive: "a.tar.gz", golden: "tar-pax-2m.tar.gz",
			build: func(t *testing.T) []byte {
				pax := rawTarHeader("PaxHeaders/x", tar.TypeXHeader, 2<<20)
				pax = append(pax, bytes.Repeat([]byte("9 a=bcd\n"), 2<<20/8)...)
				return gz(t, append(pax, tarOf(t, file("x", "x"))...))
			},
			check: isLimit("the archive has a tar extended header (PAX records or a long name) over 1 MiB; at most 1 MiB is allowed")},
		{name: "symlink through another link then up", archive: "a.tar", golden: "symlink-through-link.tar",
			build: func(t *testing.T) []byte {
				return tarOf(t, dir("sub/"), symlink("sub/up", ".."), symlink("esc", "sub/up/../.."), file("ok.txt", "ok"))
			},
			check: isEntry},
		{name: "symlink through a later link then up", archive: "a.tar",
			build: func(t *testing.T) []byte {
				return tarOf(t, symlink("esc", "sub/up/../../outside/passwd"), dir("sub/"), symlink("sub/up", ".."))
			},
			check: isEntry},
		{name: "zip symlink through another link then up", archive: "a.zip",
			build: func(t *testing.T) []byte {
				return zipOf(t, zipItem{"up", fs.ModeSymlink | 0o777, "."}, zipItem{"esc", fs.ModeSymlink | 0o777, "up/.."})
			},
			check: isEntry},
	}
}

// TestDeclaredSizesAreNotAllocated measures the memory Decompress
// allocates for archives that declare a 1.5 or 4 GiB xz dictionary, a
// 2 GiB or 1 TiB zstd window, 10 million zip entries, or hold a million
// and one zip directory records (archive/zip alone would keep ~250 MB of
// them): each is refused having allocated a few MiB.
func TestDeclaredSizesAreNotAllocated(t *testing.T) {
	level := string(tarOf(t, file("world/level.dat", "level")))
	for _, tc := range []struct {
		name, archive string
		data          []byte
	}{
		{"xz 1.5 GiB dictionary", "a.tar.xz", xzWithDict(37, level)},
		{"xz 4 GiB dictionary", "a.tar.xz", xzWithDict(40, level)},
		{"zstd 2 GiB window", "a.tar.zst", zstdFrameOf(21<<3, level)},
		{"zstd 1 TiB single segment", "a.tar.zst", zstdSingleSegment(1<<40, level)},
		{"zstd zip entry 2 GiB window", "a.zip", zipZstdEntry(t, "x", zstdFrameOf(21<<3, "x"))},
		{"zip64 declaring 10 million entries", "a.zip", zipAsZip64(t, zipOf(t, zipItem{"ok.txt", 0o644, "fine"}), 10_000_000)},
		{"zip holding 1,000,001 records", "a.zip", zipRecords(MaxEntries+1, uint16((MaxEntries+1)%65536))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if err := os.WriteFile(filepath.Join(w.root, tc.archive), tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := Decompress(t.Context(), w.r, tc.archive, ".", budget(1<<30))
			runtime.ReadMemStats(&after)
			if _, ok := errors.AsType[*EntryError](err); !ok {
				t.Fatalf("Decompress = %v, want a refusal", err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("refused (%v) having allocated %s", err, sizeString(alloc))
			if alloc >= 32<<20 {
				t.Errorf("Decompress allocated %s, want < 32 MiB", sizeString(alloc))
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB",
		3 << 29: "1.5 GiB", 1<<32 - 1: "4 GiB", 1 << 40: "1 TiB", 1<<64 - 1: "16 EiB",
	} {
		if got := sizeString(n); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestDecompressZstdLong: an archive made by `zstd -19 --long=27` (a
// 128 MiB window, the zstd tool's own default limit) extracts. Its
// companion made with --long=28 is refused (limitCases).
func TestDecompressZstdLong(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "long.tar.zst", string(readTestdata(t, "long27.tar.zst")), 0o644)
	if err := Decompress(t.Context(), w.r, "long.tar.zst", ".", budget(1<<30)); err != nil {
		t.Fatalf("Decompress = %v", err)
	}
	want := readTestdata(t, "xz/input.bin")
	if got := readString(t, filepath.Join(w.root, "world/notes.bin")); got != string(want) {
		t.Errorf("world/notes.bin: %d bytes, want the %d of testdata/xz/input.bin", len(got), len(want))
	}
}

// TestDecompressXZUtils: a .tar.xz as XZ Utils writes it with several
// threads (blocks with their sizes in their headers) extracts.
func TestDecompressXZUtils(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "world.tar.xz", string(readTestdata(t, "xz/blocks.tar.xz")), 0o644)
	if err := Decompress(t.Context(), w.r, "world.tar.xz", ".", budget(1<<30)); err != nil {
		t.Fatalf("Decompress = %v", err)
	}
	want := readTestdata(t, "xz/input.bin")
	if got := readString(t, filepath.Join(w.root, "world/notes.bin")); got != string(want) {
		t.Errorf("world/notes.bin: %d bytes, want the %d of testdata/xz/input.bin", len(got), len(want))
	}
}

// rawTarHeader is a ustar header block for a member of typ and size,
// which archive/tar's writer would not write (an extended header).
func rawTarHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}
