package archive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/kilnhq/kiln/internal/files"
)

var update = flag.Bool("update", false, "rewrite testdata/* from the generators")

// tarItem is one hand-made tar member: a header and, for a file, content.
type tarItem struct {
	h    tar.Header
	body string
}

func file(name, body string) tarItem {
	return tarItem{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body}
}

func dir(name string) tarItem {
	return tarItem{h: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}

func symlink(name, target string) tarItem {
	return tarItem{h: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) tarItem {
	return tarItem{h: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644}}
}

func special(name string, typ byte) tarItem {
	return tarItem{h: tar.Header{Name: name, Typeflag: typ, Mode: 0o666, Devmajor: 1, Devminor: 3}}
}

func tarOf(t *testing.T, items ...tarItem) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, it := range items {
		h := it.h
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %q: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, it.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipItem is one hand-made zip member.
type zipItem struct {
	name string
	mode fs.FileMode
	body string
}

func zipOf(t *testing.T, items ...zipItem) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, it := range items {
		h := &zip.FileHeader{Name: it.name, Method: zip.Deflate}
		h.SetMode(it.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, it.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// deflated compresses n zero bytes.
func deflated(t *testing.T, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw, _ := flate.NewWriter(&buf, flate.BestCompression)
	if _, err := io.CopyN(fw, zeros{}, n); err != nil {
		t.Fatal(err)
	}
	fw.Close()
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// rawZip writes one deflated member with the sizes and CRC it is told,
// whatever the data holds.
func rawZip(t *testing.T, name string, data []byte, crc uint32, size uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, CRC32: crc,
		CompressedSize64: uint64(len(data)), UncompressedSize64: size}
	h.SetMode(0o644)
	w, err := zw.CreateRaw(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipBomb: 100 MiB of zeros, honestly declared, in ~100 KiB.
func zipBomb(t *testing.T) []byte {
	const n = 100 << 20
	return rawZip(t, "zeros.bin", deflated(t, n), crcOfZeros(n), n)
}

func crcOfZeros(n int64) uint32 {
	h := crc32.NewIEEE()
	io.CopyN(h, zeros{}, n)
	return h.Sum32()
}

// localHeaderLies patches the sizes in the first local file header (the
// central directory stays honest).
func localHeaderLies(t *testing.T) []byte {
	body := "the real content of the file\n"
	z := zipOf(t, zipItem{"notes.txt", 0o644, body})
	if binary.LittleEndian.Uint32(z) != 0x04034b50 {
		t.Fatal("no local file header at 0")
	}
	binary.LittleEndian.PutUint32(z[18:], 1)     // compressed size
	binary.LittleEndian.PutUint32(z[22:], 1<<30) // uncompressed size
	return z
}

// paxName writes a file whose PAX path record is then patched to hold a
// NUL byte (tar.Writer refuses to write one).
func paxNUL(t *testing.T) []byte {
	long := strings.Repeat("n", 120) + "MARK"
	b := tarOf(t, file(long, "x"))
	i := bytes.LastIndex(b, []byte("MARK"))
	if i < 0 {
		t.Fatal("no PAX record")
	}
	b[i] = 0
	return b
}

// lyingTar: a member that claims size 1 and is followed by more data than
// that, then one claiming 1 MiB and holding 100 bytes.
func tarClaimsLess(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("A"))
	tw.Flush()
	buf.WriteString(strings.Repeat("more data than the header said: ", 64))
	tw.Close()
	return buf.Bytes()
}

func tarClaimsMore(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("ok"))
	tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20})
	tw.Write(bytes.Repeat([]byte("x"), 100))
	return buf.Bytes() // no more data, no trailer
}

func tarGzBomb(t *testing.T) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	const n = 100 << 20
	tw.WriteHeader(&tar.Header{Name: "zeros.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: n})
	io.CopyN(tw, zeros{}, n)
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

type hostileCase struct {
	name    string
	archive string // file name in the root: its extension picks the reader
	golden  string // testdata file holding build's output (committed; -update rewrites)
	build   func(*testing.T) []byte
	free    int64                        // 0: 1 GiB
	check   func(error) bool             // the error class expected
	after   func(t *testing.T, w *world) // for cases that succeed: what must hold
}

func hostileCases() []hostileCase {
	return []hostileCase{
		{name: "dot-dot entry", archive: "a.tar", golden: "dotdot.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("ok.txt", "fine"), file("../evil.txt", "evil")) },
			check: isEntry},
		{name: "dot-dot to etc/passwd", archive: "a.tar.gz", golden: "etc-passwd.tar.gz",
			build: func(t *testing.T) []byte { return gz(t, tarOf(t, file("../../etc/passwd", "pwned\n"))) },
			check: isEntry},
		{name: "dot-dot inside a name", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("plugins/../../../outside/x", "evil")) },
			check: isEntry},
		{name: "absolute name", archive: "a.tar", golden: "absolute.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("/etc/cron.d/x", "* * * * * root sh\n")) },
			check: isEntry},
		{name: "zip slip", archive: "a.zip", golden: "zip-slip.zip",
			build: func(t *testing.T) []byte {
				return zipOf(t, zipItem{"ok.txt", 0o644, "fine"}, zipItem{"../../outside/evil.txt", 0o644, "evil"})
			},
			check: isEntry},
		{name: "zip absolute name", archive: "a.jar",
			build: func(t *testing.T) []byte { return zipOf(t, zipItem{"/etc/cron.d/x", 0o644, "evil"}) },
			check: isEntry},
		{name: "zip NUL in name", archive: "a.zip",
			build: func(t *testing.T) []byte { return zipOf(t, zipItem{"a\x00/../../x", 0o644, "evil"}) },
			check: isEntry},
		{name: "tar NUL in PAX path", archive: "a.tar",
			build: paxNUL, check: is(ErrUnsupported)},
		{name: "invalid UTF-8 name", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("caf\xe9.txt", "x")) },
			check: isEntry},
		{name: "symlink to /etc then a file through it", archive: "a.tar", golden: "symlink-etc.tar",
			build: func(t *testing.T) []byte { return tarOf(t, symlink("a", "/etc"), file("a/passwd", "pwned\n")) },
			check: isEntry},
		{name: "symlink to ../.. then a file through it", archive: "a.tar", golden: "symlink-dotdot.tar",
			build: func(t *testing.T) []byte {
				return tarOf(t, symlink("a", "../../"), file("a/outside/passwd", "pwned\n"))
			},
			check: isEntry},
		{name: "symlink inside then a file through it", archive: "a.tar",
			build: func(t *testing.T) []byte {
				return tarOf(t, dir("sub/"), symlink("a", "sub"), file("a/passwd", "through a link\n"))
			},
			check: isEntry},
		{name: "zip symlink to /etc then a file through it", archive: "a.zip",
			build: func(t *testing.T) []byte {
				return zipOf(t, zipItem{"a", fs.ModeSymlink | 0o777, "/etc"}, zipItem{"a/passwd", 0o644, "pwned\n"})
			},
			check: isEntry},
		{name: "symlink to an absolute path alone", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, symlink("shadow", "/etc/shadow")) },
			check: isEntry},
		{name: "hard link to /etc/passwd", archive: "a.tar", golden: "hardlink-etc-passwd.tar",
			build: func(t *testing.T) []byte { return tarOf(t, hardlink("passwd", "/etc/passwd")) },
			check: isEntry},
		{name: "hard link to ../outside", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, hardlink("passwd", "../../outside/passwd")) },
			check: isEntry},
		{name: "hard link to a later entry", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, hardlink("b", "a"), file("a", "x")) },
			check: isEntry},
		{name: "hard link to a directory", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, dir("d/"), hardlink("b", "d")) },
			check: isEntry},
		{name: "hard link to a symlink", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, symlink("l", "x"), hardlink("b", "l")) },
			check: isEntry},
		{name: "char device", archive: "a.tar", golden: "chardev.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("ok.txt", "ok"), special("null", tar.TypeChar)) },
			check: isEntry},
		{name: "block device", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, special("sda", tar.TypeBlock)) },
			check: isEntry},
		{name: "FIFO", archive: "a.tar", golden: "fifo.tar",
			build: func(t *testing.T) []byte { return tarOf(t, special("pipe", tar.TypeFifo)) },
			check: isEntry},
		{name: "zip char device", archive: "a.zip",
			build: func(t *testing.T) []byte {
				return zipOf(t, zipItem{"null", fs.ModeDevice | fs.ModeCharDevice | 0o666, ""})
			},
			check: isEntry},
		{name: "zip FIFO", archive: "a.zip",
			build: func(t *testing.T) []byte { return zipOf(t, zipItem{"pipe", fs.ModeNamedPipe | 0o666, ""}) },
			check: isEntry},
		{name: "zip socket", archive: "a.zip",
			build: func(t *testing.T) []byte { return zipOf(t, zipItem{"sock", fs.ModeSocket | 0o666, ""}) },
			check: isEntry},
		{name: "duplicate file", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("a", "1"), file("a", "2")) },
			check: isEntry},
		{name: "file then directory of the same name", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file("a", "1"), file("a/b", "2")) },
			check: isEntry},
		{name: "file named dot", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file(".", "x")) },
			check: isEntry},
		{name: "name over 32 KiB", archive: "a.tar",
			build: func(t *testing.T) []byte { return tarOf(t, file(strings.Repeat("a/", 17000)+"x", "x")) },
			check: isEntry},
		{name: "zip local header lies about sizes", archive: "a.zip", golden: "zip-local-lies.zip",
			build: localHeaderLies, check: func(err error) bool { return err == nil },
			after: func(t *testing.T, w *world) {
				// Sizes come from the central directory; content is checked by CRC.
				if b, err := os.ReadFile(filepath.Join(w.root, "notes.txt")); err != nil || string(b) != "the real content of the file\n" {
					t.Errorf("notes.txt = %q, %v", b, err)
				}
			}},
		{name: "zip both headers lie about sizes", archive: "a.zip", golden: "zip-sizes-lie.zip",
			build: func(t *testing.T) []byte { return rawZip(t, "small.txt", deflated(t, 10<<20), 0, 10) },
			check: is(ErrUnsupported)},
		{name: "zip wrong CRC", archive: "a.zip",
			build: func(t *testing.T) []byte { return rawZip(t, "z.bin", deflated(t, 1000), 12345, 1000) },
			check: is(ErrUnsupported)},
		{name: "tar header claims 1 byte and holds more", archive: "a.tar", golden: "tar-claims-less.tar",
			build: tarClaimsLess, check: is(ErrUnsupported)},
		{name: "tar header claims more than it holds", archive: "a.tar", golden: "tar-claims-more.tar",
			build: tarClaimsMore, check: is(ErrUnsupported)},
		{name: "tar.gz bomb past a 10 MiB budget", archive: "a.tar.gz", golden: "bomb.tar.gz",
			build: tarGzBomb, free: 10 << 20, check: is(files.ErrQuota)},
		{name: "zip bomb against a 10 MiB budget", archive: "a.zip",
			build: zipBomb, free: 10 << 20, check: is(files.ErrQuota)},
		{name: "gz bomb past a 10 MiB budget", archive: "zeros.bin.gz",
			build: func(t *testing.T) []byte {
				var buf bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
				io.CopyN(zw, zeros{}, 50<<20)
				zw.Close()
				return buf.Bytes()
			},
			free: 10 << 20, check: is(files.ErrQuota)},
		{name: "many small files past the budget", archive: "a.tar",
			build: func(t *testing.T) []byte {
				var items []tarItem
				for i := range 40 {
					items = append(items, file(strings.Repeat("d/", i%5)+"f"+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("y", 1000)))
				}
				return tarOf(t, items...)
			},
			free: 20000, check: is(files.ErrQuota)},
		{name: "not gzip at all", archive: "a.tar.gz",
			build: func(t *testing.T) []byte { return []byte("this is not a gzip stream, just text") },
			check: is(ErrUnsupported)},
		{name: "truncated tar.zst", archive: "a.tar.zst",
			build: func(t *testing.T) []byte {
				var buf bytes.Buffer
				zw, _ := zstd.NewWriter(&buf)
				zw.Write(tarOf(t, file("a.txt", strings.Repeat("hello ", 10000))))
				zw.Close()
				return buf.Bytes()[:buf.Len()/2]
			},
			check: is(ErrUnsupported)},
		{name: "corrupt tar.xz", archive: "a.tar.xz",
			build: func(t *testing.T) []byte {
				var buf bytes.Buffer
				xw, _ := xz.NewWriter(&buf)
				xw.Write(tarOf(t, file("a.txt", strings.Repeat("hello ", 10000))))
				xw.Close()
				b := buf.Bytes()
				b[len(b)/2] ^= 0xff
				return b
			},
			check: is(ErrUnsupported)},
		{name: "not a zip", archive: "a.zip",
			build: func(t *testing.T) []byte { return []byte("PK but not really") },
			check: is(ErrUnsupported)},
		{name: "unknown extension", archive: "a.rar",
			build: func(t *testing.T) []byte { return []byte("Rar!\x1a\x07\x00") },
			check: is(ErrUnsupported)},
		{name: "setuid, setgid and sticky bits dropped", archive: "a.tar", golden: "setuid.tar",
			build: func(t *testing.T) []byte {
				su := file("su", "#!/bin/sh\n")
				su.h.Mode = 0o4755
				sg := dir("shared/")
				sg.h.Mode = 0o3775
				return tarOf(t, su, sg)
			},
			check: func(err error) bool { return err == nil },
			after: func(t *testing.T, w *world) {
				for name, want := range map[string]fs.FileMode{"su": 0o755, "shared": fs.ModeDir | 0o775} {
					fi, err := os.Lstat(filepath.Join(w.root, name))
					if err != nil || fi.Mode() != want {
						t.Errorf("mode of %s = %v, %v; want %v", name, fi.Mode(), err, want)
					}
				}
			}},
		{name: "zip backslash names stay literal names inside", archive: "a.zip",
			build: func(t *testing.T) []byte { return zipOf(t, zipItem{`..\..\outside\evil.txt`, 0o644, "harmless"}) },
			check: func(err error) bool { return err == nil },
			after: func(t *testing.T, w *world) {
				if _, err := os.Lstat(filepath.Join(w.root, `..\..\outside\evil.txt`)); err != nil {
					t.Errorf("literal backslash name not extracted inside the root: %v", err)
				}
			}},
		{name: "kiln temporary names refused", archive: "a.tar",
			build: func(t *testing.T) []byte {
				return tarOf(t, file("ok.txt", "ok"), file(".kiln-tmp-restore-x/journal", "del \"../x\"\n"))
			},
			check: func(err error) bool {
				ee, ok := errors.AsType[*EntryError](err)
				return ok && ee.Name == ".kiln-tmp-restore-x/journal" && strings.Contains(ee.Error(), "reserved for Kiln")
			}},
		{name: "kiln temporary names refused below a directory", archive: "a.zip",
			build: func(t *testing.T) []byte {
				return zipOf(t, zipItem{name: "ok/.kiln-tmp-1", mode: 0o644, body: "x"})
			},
			check: func(err error) bool {
				_, ok := errors.AsType[*EntryError](err)
				return ok && strings.Contains(err.Error(), "reserved for Kiln")
			}},
	}
}

// TestHostileArchives decompresses each hostile archive into the root of
// a server that has a sibling server and an outside directory next to it,
// and checks the error class, that nothing outside the root changed (to
// the modification time), and that a refused archive left the root as it
// was.
func TestHostileArchives(t *testing.T) {
	for _, tc := range append(hostileCases(), limitCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			var data []byte
			switch {
			case tc.golden == "":
				data = tc.build(t)
			case *update:
				data = tc.build(t)
				if err := os.WriteFile(filepath.Join("testdata", tc.golden), data, 0o644); err != nil {
					t.Fatal(err)
				}
			default:
				var err error
				if data, err = os.ReadFile(filepath.Join("testdata", tc.golden)); err != nil {
					t.Fatal(err)
				}
			}
			w := newWorld(t)
			writeFile(t, w.root, "server.properties", "motd=mine\n", 0o644)
			writeFile(t, w.root, "world/level.dat", "level", 0o644)
			writeFile(t, w.root, tc.archive, string(data), 0o644)
			if err := os.Symlink("world", filepath.Join(w.root, "inside-link")); err != nil {
				t.Fatal(err)
			}
			root := snapshot(t, w.root, false)
			outside := w.outside(t)
			free := tc.free
			if free == 0 {
				free = 1 << 30
			}

			err := Decompress(t.Context(), w.r, tc.archive, ".", budget(free))
			if !tc.check(err) {
				t.Fatalf("Decompress(%s) = %v (%T), wrong error", tc.name, err, err)
			}
			if d := diffSnapshots(outside, w.outside(t)); d != "" {
				t.Errorf("outside the root changed:\n%s", d)
			}
			if err != nil {
				if d := diffSnapshots(root, snapshot(t, w.root, false)); d != "" {
					t.Errorf("refused, but the root changed:\n%s", d)
				}
				t.Logf("refused: %v", err)
			}
			if tc.after != nil {
				tc.after(t, w)
			}
		})
	}
}

// TestDecompressIntoSubdirectory: names are relative to the directory
// given, and a ".." that would stay inside the root is refused all the
// same.
func TestDecompressIntoSubdirectory(t *testing.T) {
	w := newWorld(t)
	writeFile(t, w.root, "plugins/old.yml", "old", 0o644)
	writeFile(t, w.root, "a.tar", string(tarOf(t, file("../server.properties", "replaced"))), 0o644)
	before := snapshot(t, w.root, false)
	if err := Decompress(t.Context(), w.r, "a.tar", "plugins", budget(1<<30)); !isEntry(err) {
		t.Fatalf("Decompress = %v, want an *EntryError", err)
	}
	if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
		t.Errorf("root changed:\n%s", d)
	}
	writeFile(t, w.root, "b.tar", string(tarOf(t, file("cfg/new.yml", "new"))), 0o644)
	if err := Decompress(t.Context(), w.r, "b.tar", "plugins", budget(1<<30)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(w.root, "plugins/cfg/new.yml")); err != nil || string(b) != "new" {
		t.Errorf("plugins/cfg/new.yml = %q, %v", b, err)
	}
}

func TestDecompressTooManyEntries(t *testing.T) {
	w := newWorld(t)
	var items []tarItem
	for i := range 11 {
		items = append(items, file("f"+strings.Repeat("x", i), "x"))
	}
	writeFile(t, w.root, "a.tar", string(tarOf(t, items...)), 0o644)
	before := snapshot(t, w.root, false)
	err := decompress(t.Context(), w.r, "a.tar", ".", budget(1<<30), 10)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("decompress = %v, want ErrUnsupported", err)
	}
	if d := diffSnapshots(before, snapshot(t, w.root, false)); d != "" {
		t.Errorf("root changed:\n%s", d)
	}
}
